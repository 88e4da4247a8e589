"""Record what NVML really answers on a GPU machine, and replay it in tests.

Run on a machine with an NVIDIA driver (the lent H200; see TESTING.md "A real GPU"):

    python3 tools/record_nvml.py OUT_DIR [--samples 10] [--interval 0.5] [--light]

It polls `sparkdeck.host.nvml.NvmlReader` through `RecordingNvml`, a proxy around pynvml that
writes down the raw answer of every NVML call the reader makes (the value, or the NVMLError
code's name), first N times with the GPU idle, then N times under a matrix-multiply load in a
child process. While the load still runs it saves `nvidia-smi -q -x` beside the recording, so
tests can check the reader's figures against NVIDIA's own tool from the same minute.

With `--light` a third phase follows: N samples under a small matmul loop (2048x2048), which
keeps the GPU busy without reaching the power cap, so the recording holds a busy GPU with no
clock-event reason next to the power-capped one. Each phase also saves
`nvidia-smi -q -d PERFORMANCE` (its clock-event reasons as NVIDIA's tool words them) right after
its last sample, for the throttle detector's tests (sparkdeck/host/throttle.py).

Files written: OUT_DIR/h200_idle_load.json (rename with --name), OUT_DIR/nvidia_smi_q.xml
(<name>_q.xml under another name) and OUT_DIR/<name>_perf_<phase>.txt.
`RecordedNvml` plays such a file back as a pynvml stand-in; tests/fixtures/nvml/ holds them.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import platform
import subprocess
import sys
import time
import types
from pathlib import Path
from typing import Any

FORMAT = "sparkdeck-nvml-recording/1"

# The load runs in its own process so the reader sees it as a compute process, as it would
# see an inference engine. torch first (the lent machine has it), CuPy as the fallback.
LOAD_SCRIPT = r"""
import sys, time
try:
    import torch
    n = int(sys.argv[2])
    a = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    c = torch.empty_like(a)
    step = lambda: torch.mm(a, b, out=c)
    sync = torch.cuda.synchronize
    kind = f"torch {torch.__version__}: {n}x{n} bf16 matmul loop"
except Exception as exc:
    import cupy as cp
    n = int(sys.argv[2])
    a = cp.random.rand(n, n, dtype=cp.float32)
    b = cp.random.rand(n, n, dtype=cp.float32)
    c = cp.empty_like(a)
    step = lambda: cp.matmul(a, b, out=c)
    sync = cp.cuda.runtime.deviceSynchronize
    kind = f"cupy {cp.__version__}: {n}x{n} fp32 matmul loop (torch: {exc})"
step(); sync()
print("READY", kind, flush=True)
deadline = time.time() + float(sys.argv[1])
while time.time() < deadline:
    for _ in range(20):
        step()
    sync()
"""


def _pynvml() -> types.ModuleType:
    import pynvml

    return pynvml


def _error_names(pynvml: types.ModuleType) -> dict[int, str]:
    return {
        value: name
        for name, value in vars(pynvml).items()
        if name.startswith("NVML_ERROR_") and isinstance(value, int)
    }


class ReplayHandle:
    """Stands for a device handle in a replay; recorded as {"__handle__": "gpu0"}."""

    def __init__(self, label: str) -> None:
        self.label = label

    def __repr__(self) -> str:
        return f"ReplayHandle({self.label!r})"


def _replay_label(value: Any) -> str | None:
    return value.label if isinstance(value, ReplayHandle) else None


def _encode(value: Any, handle_label: Any) -> Any:
    """A JSON form of one pynvml answer: plain values as they are, structs as field dicts."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, bytes):
        return value.decode(errors="replace")
    if isinstance(value, (list, tuple)):
        return [_encode(v, handle_label) for v in value]
    label = handle_label(value)
    if label is not None:
        return {"__handle__": label}
    if isinstance(value, ctypes.Structure):
        fields = {name: _encode(getattr(value, name), handle_label) for name, *_ in value._fields_}
        return {"__struct__": type(value).__name__, **fields}
    if hasattr(value, "__dict__"):  # pynvml's nvmlFriendlyObject (process lists)
        return {
            "__struct__": type(value).__name__,
            **{k: _encode(v, handle_label) for k, v in vars(value).items()},
        }
    return {"__repr__": repr(value)}


def _decode(value: Any) -> Any:
    if isinstance(value, list):
        return [_decode(v) for v in value]
    if isinstance(value, dict):
        if "__handle__" in value:
            return ReplayHandle(value["__handle__"])
        return types.SimpleNamespace(
            **{k: _decode(v) for k, v in value.items() if not k.startswith("__")}
        )
    return value


def call_key(name: str, args: tuple[Any, ...], kwargs: dict[str, Any], label: Any) -> str:
    """How one call is filed in a recording: "nvmlDeviceGetClockInfo(gpu0, 1)"."""
    parts = [label(a) or repr(a) for a in args]
    parts += [f"{k}={label(v) or repr(v)}" for k, v in sorted(kwargs.items())]
    return f"{name}({', '.join(parts)})"


class RecordingNvml:
    """pynvml, but every call's answer (or NVMLError) is written into the current sample."""

    def __init__(self, pynvml: types.ModuleType | None = None) -> None:
        self._real = pynvml or _pynvml()
        self._errors = _error_names(self._real)
        self._labels: dict[int, str] = {}
        self.session: dict[str, Any] = {}  # calls made outside any sample
        self.samples: list[dict[str, Any]] = []
        self.extras: dict[str, dict[str, Any]] = {}  # calls the reader does not make (yet)
        self._calls = self.session
        self._t0 = time.monotonic()

    def begin_sample(self, phase: str) -> None:
        sample = {"phase": phase, "t": round(time.monotonic() - self._t0, 3), "calls": {}}
        self.samples.append(sample)
        self._calls = sample["calls"]

    def begin_extras(self, phase: str) -> None:
        self._calls = self.extras.setdefault(phase, {})

    def end_sample(self) -> None:
        self._calls = self.session

    def _label(self, value: Any) -> str | None:
        if isinstance(value, ctypes._Pointer):
            return self._labels.get(ctypes.cast(value, ctypes.c_void_p).value or 0)
        return None

    def __getattr__(self, name: str) -> Any:
        real = getattr(self._real, name)
        if not (name.startswith("nvml") and isinstance(real, types.FunctionType)):
            return real  # constants and the NVMLError classes

        def recorded(*args: Any, **kwargs: Any) -> Any:
            key = call_key(name, args, kwargs, self._label)
            try:
                result = real(*args, **kwargs)
            except self._real.NVMLError as exc:
                code = getattr(exc, "value", None)
                self._calls[key] = {
                    "__error__": self._errors.get(code, str(code)),
                    "code": code,
                    "message": str(exc),
                }
                raise
            except (TypeError, AttributeError) as exc:  # bindings too old for this call
                self._calls[key] = {"__raise__": type(exc).__name__, "message": str(exc)}
                raise
            if name == "nvmlDeviceGetHandleByIndex":
                address = ctypes.cast(result, ctypes.c_void_p).value or 0
                self._labels[address] = f"gpu{args[0]}"
            self._calls[key] = _encode(result, self._label)
            return result

        return recorded


class RecordedNvml:
    """A pynvml stand-in answering from a recording made by tools/record_nvml.py.

    The H200 fixture (tests/fixtures/nvml/h200_idle_load.json) is a replay of a recording from
    a real NVIDIA H200, idle and under load; a fixture's "_note" says whether it was recorded
    or written by hand. `use(i)` picks the sample that answers; a call missing from it is
    answered from the session or the first sample that has it (nvmlInit happens once), and a
    call never recorded raises LookupError, so a reader that grows a new NVML call fails its
    replay tests until it is recorded too. Constants and NVMLError come from the real pynvml.
    """

    def __init__(self, recording: dict[str, Any] | str | os.PathLike[str]) -> None:
        if not isinstance(recording, dict):
            recording = json.loads(Path(recording).read_text())
        if recording.get("format") != FORMAT:
            raise ValueError(f"not a {FORMAT} file")
        self.recording = recording
        self.samples: list[dict[str, Any]] = recording["samples"]
        self.host_mem_total_bytes: int | None = recording.get("host_mem_total_bytes")
        self._real = _pynvml()
        self.current = 0
        self.calls: list[str] = []  # every key asked for, in order

    def use(self, index: int) -> RecordedNvml:
        self.current = index
        return self

    def indices(self, phase: str) -> list[int]:
        return [i for i, s in enumerate(self.samples) if s["phase"] == phase]

    def _lookup(self, key: str) -> Any:
        places = [
            self.samples[self.current]["calls"],
            self.recording.get("session", {}),
            *(s["calls"] for s in self.samples),
        ]
        for calls in places:
            if key in calls:
                return calls[key]
        raise LookupError(f"{key} was not recorded")

    def __getattr__(self, name: str) -> Any:
        real = getattr(self._real, name)
        if not (name.startswith("nvml") and isinstance(real, types.FunctionType)):
            return real

        def replayed(*args: Any, **kwargs: Any) -> Any:
            key = call_key(name, args, kwargs, _replay_label)
            self.calls.append(key)
            answer = self._lookup(key)
            if isinstance(answer, dict) and "__error__" in answer:
                raise self._real.NVMLError(answer["code"])
            if isinstance(answer, dict) and "__raise__" in answer:
                raise {"TypeError": TypeError}.get(answer["__raise__"], AttributeError)(
                    answer["message"]
                )
            return _decode(answer)

        return replayed


def _host_mem_total() -> int | None:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


def _record_extras(nvml: RecordingNvml, phase: str) -> None:
    """Answers the reader does not use today, kept for the next question about this GPU."""
    nvml.begin_extras(phase)
    try:
        handle = nvml.nvmlDeviceGetHandleByIndex(0)
        asks = [
            ("nvmlDeviceGetMemoryInfo", (handle,), {}),  # v1: used includes reserved
            ("nvmlDeviceGetPowerManagementLimit", (handle,), {}),
            ("nvmlDeviceGetPowerManagementDefaultLimit", (handle,), {}),
            ("nvmlDeviceGetTotalEnergyConsumption", (handle,), {}),
            ("nvmlDeviceGetClockInfo", (handle, nvml.NVML_CLOCK_GRAPHICS), {}),
            ("nvmlDeviceGetSupportedClocksEventReasons", (handle,), {}),
            ("nvmlDeviceGetCudaComputeCapability", (handle,), {}),
            ("nvmlDeviceGetCurrPcieLinkGeneration", (handle,), {}),
        ]
        for name, args, kwargs in asks:
            try:
                getattr(nvml, name)(*args, **kwargs)
            except (nvml.NVMLError, AttributeError, TypeError):
                pass  # the error, if NVML's, is already written down
    except Exception as exc:  # noqa: BLE001 - extras are a bonus: never lose the recording over them
        print(f"extras ({phase}) failed: {exc!r}", flush=True)
    finally:
        nvml.end_sample()


def _summary(phase: str, reading: Any) -> dict[str, Any]:
    gpu = reading.gpus[0] if reading.gpus else None
    keys = (
        "sm_clock_mhz",
        "mem_clock_mhz",
        "utilisation_gpu",
        "utilisation_memory",
        "power_w",
        "temperature_c",
        "pstate",
        "clock_event_reasons",
        "memory_used",
        "processes",
    )
    return {
        "phase": phase,
        "error": reading.error,
        **({k: getattr(gpu, k) for k in keys} if gpu else {}),
    }


def _save_performance(out: Path, stem: str, phase: str) -> None:
    """nvidia-smi's own view of clocks and clock-event reasons at the end of a phase."""
    smi = subprocess.run(
        ["nvidia-smi", "-q", "-d", "PERFORMANCE"], capture_output=True, text=True, timeout=60
    )
    (out / f"{stem}_perf_{phase}.txt").write_text(smi.stdout)


def _start_load(size: int, seconds: float) -> tuple[subprocess.Popen[str], str]:
    load = subprocess.Popen(
        [sys.executable, "-c", LOAD_SCRIPT, str(seconds), str(size)],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert load.stdout is not None
    ready = load.stdout.readline().strip()
    if not ready.startswith("READY"):
        raise SystemExit(f"load did not start (exit {load.wait()})")
    print(ready, flush=True)
    return load, ready.removeprefix("READY ").strip()


def _stop_load(load: subprocess.Popen[str]) -> None:
    load.terminate()
    load.wait(timeout=30)


def record(
    out: Path,
    samples: int,
    interval: float,
    warmup: float,
    stem: str = "h200_idle_load",
    light: bool = False,
) -> dict[str, Any]:
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from sparkdeck.host.nvml import NvmlReader

    pynvml = _pynvml()
    nvml = RecordingNvml(pynvml)
    host_total = _host_mem_total()
    reader = NvmlReader(nvml, host_total_bytes=host_total)
    summary: list[dict[str, Any]] = []
    loads: dict[str, str] = {}

    def poll(phase: str) -> None:
        for _ in range(samples):
            nvml.begin_sample(phase)
            reading = reader.read()
            nvml.end_sample()
            summary.append(_summary(phase, reading))
            print(json.dumps(summary[-1]), flush=True)
            time.sleep(interval)
        _save_performance(out, stem, phase)

    poll("idle")
    _record_extras(nvml, "idle")
    seconds = warmup + samples * (interval + 0.05) + 60
    load, loads["load"] = _start_load(8192, seconds)
    try:
        time.sleep(warmup)
        poll("load")
        _record_extras(nvml, "load")
        # Captured while the load still runs, so the load process shows in both.
        smi = subprocess.run(["nvidia-smi", "-q", "-x"], capture_output=True, text=True, timeout=60)
        xml_name = "nvidia_smi_q.xml" if stem == "h200_idle_load" else f"{stem}_q.xml"
        (out / xml_name).write_text(smi.stdout)
        smi_at = round(time.monotonic() - nvml._t0, 3)
    finally:
        _stop_load(load)
    if light:
        load, loads["light"] = _start_load(2048, seconds)
        try:
            time.sleep(warmup)
            poll("light")
        finally:
            _stop_load(load)
    reader.close()
    ready = "READY " + "; ".join(f"{k}: {v}" for k, v in loads.items())

    recording = {
        "_note": (
            "Recorded by tools/record_nvml.py on a real GPU machine: the raw answer of "
            "every NVML call sparkdeck's NvmlReader made (struct fields as dicts, errors "
            "as NVML_ERROR_* names), first with the GPU idle, then under a matmul load in "
            "a child process (and, with a 'light' phase, under a small matmul that stays "
            "below the power cap). nvidia_smi_q.xml beside it was captured in the same run, "
            "at nvidia_smi_at seconds, with the load still running."
        ),
        "format": FORMAT,
        "recorded_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "machine": {
            "host": platform.node(),
            "kernel": platform.release(),
            "python": platform.python_version(),
            "pynvml": getattr(pynvml, "__version__", None) or _dist_version(),
            "load": ready.removeprefix("READY ").strip(),
        },
        "host_mem_total_bytes": host_total,
        "interval_s": interval,
        "nvidia_smi_at": smi_at,
        "session": nvml.session,
        "samples": nvml.samples,
        "extras": nvml.extras,
        "summary": summary,
    }
    return recording


def _dist_version() -> str | None:
    try:
        from importlib.metadata import version

        return version("nvidia-ml-py")
    except Exception:  # noqa: BLE001 - any packaging oddity: the version is only a note
        return None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--samples", type=int, default=10)
    parser.add_argument("--interval", type=float, default=0.5)
    parser.add_argument("--warmup", type=float, default=4.0)
    parser.add_argument("--name", default="h200_idle_load.json")
    parser.add_argument(
        "--light",
        action="store_true",
        help="add a phase under a small load that stays below the power cap",
    )
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    stem = args.name.removesuffix(".json")
    recording = record(args.out, args.samples, args.interval, args.warmup, stem, args.light)
    (args.out / args.name).write_text(json.dumps(recording, indent=1) + "\n")
    print(f"wrote {args.out / args.name} and {args.out / 'nvidia_smi_q.xml'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
