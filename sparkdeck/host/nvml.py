"""GPU telemetry from NVML: clocks, utilisation, power, temperature, memory, processes.

`gpu_presence()` asks once whether there is a GPU at all (`sparkdeck status`). One
`NvmlReader` per process; `read()` returns a frozen `GpuReading` and never raises, so a
panel can poll it once a second on a box with no driver, an old driver or a GB10.

Two rules shape this module:

- Whatever NVML cannot answer is None, never 0. A GB10 answers NOT_SUPPORTED for memory info,
  the power limit and the fan; a 0 there would read as "no memory used" or "fan stopped".
- Only cheap NVML queries (microseconds each, no process spawning, no nvidia-smi), because the
  UI calls this on a timer.

On a Spark CPU and GPU share one pool, so `GpuReading.unified_memory` tells the caller to take
memory figures from /proc/meminfo (sparkdeck.host.meminfo) instead of from NVML.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from types import ModuleType
from typing import Any

from sparkdeck.host.meminfo import MemInfoError, read_meminfo

# NVML's clock-event ("throttle") bits, fixed by the NVML ABI. nvidia-ml-py has two spellings
# (ClocksEvent* since driver 535, ClocksThrottle* before), so the bits are listed here once.
CLOCK_EVENT_REASONS: tuple[tuple[int, str], ...] = (
    (0x001, "idle"),
    (0x002, "applications clocks setting"),
    (0x004, "SW power cap"),
    (0x008, "HW slowdown"),
    (0x010, "sync boost"),
    (0x020, "SW thermal slowdown"),
    (0x040, "HW thermal slowdown"),
    (0x080, "HW power brake slowdown"),
    (0x100, "display clock setting"),
    (0x200, "board limit"),
    (0x400, "reliability"),
)

_PSTATE_UNKNOWN = 32  # NVML_PSTATE_UNKNOWN
_UNIFIED_TOLERANCE = 0.05  # NVML total within 5 % of MemTotal: the GPU is reporting host RAM


@dataclass(frozen=True)
class GpuSnapshot:
    """One GPU at one moment. None means NVML could not say (NOT_SUPPORTED or an error)."""

    index: int
    name: str | None
    uuid: str | None
    driver_version: str | None
    utilisation_gpu: int | None  # percent of the last sample period with a kernel running
    utilisation_memory: int | None  # percent of time device memory was being read or written
    sm_clock_mhz: int | None
    sm_clock_max_mhz: int | None
    mem_clock_mhz: int | None
    mem_clock_max_mhz: int | None
    power_w: float | None
    power_limit_w: float | None  # the enforced limit; N/A on a GB10
    temperature_c: int | None
    pstate: int | None  # 0 (fastest) .. 15
    clock_event_reasons: tuple[str, ...] | None  # why clocks are below max; () = nothing holds
    memory_total: int | None  # bytes; None on a GB10 (unified memory)
    memory_used: int | None  # bytes in use, without the driver's reservation (as nvidia-smi)
    fan_percent: int | None
    processes: tuple[tuple[int, int | None], ...] | None  # (pid, GPU bytes or None)
    # Fields that failed for a reason other than NOT_SUPPORTED, as "field: NVML message", so
    # a lost GPU or a permission problem is visible rather than a quiet row of "n/a".
    errors: tuple[str, ...] = ()


@dataclass(frozen=True)
class GpuReading:
    """Every GPU NVML sees, read at `taken_at` (time.monotonic())."""

    taken_at: float
    gpus: tuple[GpuSnapshot, ...]
    unified_memory: bool  # GPU memory is host memory: read /proc/meminfo, not memory_total
    error: str | None = None  # why the reading is empty or partial

    @property
    def ok(self) -> bool:
        return self.error is None


def decode_clock_event_reasons(mask: int) -> tuple[str, ...]:
    """Turn NVML's clock-event bitmask into readable names; unknown bits stay visible."""
    names = [name for bit, name in CLOCK_EVENT_REASONS if mask & bit]
    rest = mask & ~sum(bit for bit, _ in CLOCK_EVENT_REASONS)
    if rest:
        names.append(f"unknown (0x{rest:x})")
    return tuple(names)


def _text(value: object) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _load_pynvml() -> ModuleType | str:
    try:
        import pynvml
    except ImportError:
        return "nvidia-ml-py is not installed"
    return pynvml


def _host_mem_total() -> int | None:
    try:
        return read_meminfo().total
    except MemInfoError:
        return None


class _Device:
    """Reads one GPU's fields, turning each NVML failure into None plus a note."""

    def __init__(self, nvml: Any, handle: Any) -> None:
        self.nvml = nvml
        self.handle = handle
        self.errors: list[str] = []
        self.unsupported: set[str] = set()

    def ask(self, field: str, fn_name: str, *args: Any) -> Any:
        nvml = self.nvml
        try:
            return getattr(nvml, fn_name)(self.handle, *args)
        except nvml.NVMLError as exc:
            if getattr(exc, "value", None) == nvml.NVML_ERROR_NOT_SUPPORTED:
                self.unsupported.add(field)
            else:
                self.errors.append(f"{field}: {exc}")
            return None


class NvmlReader:
    """Polls NVML. Initialises on the first `read()`, once; `close()` shuts NVML down.

    `nvml_module` is pynvml or anything with the same functions (tests pass a replay of a
    recording); `host_total_bytes` is MemTotal, read from /proc/meminfo when not given.
    """

    def __init__(
        self,
        nvml_module: Any = None,
        host_total_bytes: int | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._module = nvml_module
        self._host_total = host_total_bytes
        self._clock = clock
        self._nvml: Any = None
        self._failure: str | None = None  # why NVML cannot be used; not retried every poll

    def _start(self) -> Any:
        if self._nvml is not None or self._failure is not None:
            return self._nvml
        module = self._module if self._module is not None else _load_pynvml()
        if isinstance(module, str):
            self._failure = f"no NVIDIA driver (NVML: {module})"
            return None
        try:
            module.nvmlInit()
        except module.NVMLError as exc:
            self._failure = f"no NVIDIA driver (NVML: {exc})"
            return None
        if self._host_total is None:
            self._host_total = _host_mem_total()
        self._nvml = module
        return module

    def read(self) -> GpuReading:
        nvml = self._start()
        taken_at = self._clock()
        if nvml is None:
            return GpuReading(taken_at, (), False, self._failure)
        try:
            driver: str | None = _text(nvml.nvmlSystemGetDriverVersion())
        except nvml.NVMLError:
            driver = None
        try:
            count = nvml.nvmlDeviceGetCount()
        except nvml.NVMLError as exc:
            return GpuReading(taken_at, (), False, f"NVML error: {exc}")
        gpus: list[GpuSnapshot] = []
        problems: list[str] = []
        unified = False
        for index in range(count):
            try:
                handle = nvml.nvmlDeviceGetHandleByIndex(index)
            except nvml.NVMLError as exc:
                # One broken GPU (e.g. fallen off the bus) must not hide the others.
                problems.append(f"GPU {index}: {exc}")
                continue
            snapshot, memory_unsupported = self._read_device(nvml, index, handle, driver)
            gpus.append(snapshot)
            unified = unified or memory_unsupported or self._looks_like_host_ram(snapshot)
        if count == 0:
            problems.append("NVML found no GPU")
        return GpuReading(taken_at, tuple(gpus), unified, "; ".join(problems) or None)

    def _looks_like_host_ram(self, gpu: GpuSnapshot) -> bool:
        # Some GB10 drivers answer memory info with MemTotal instead of NOT_SUPPORTED.
        if gpu.memory_total is None or not self._host_total:
            return False
        return abs(gpu.memory_total - self._host_total) <= _UNIFIED_TOLERANCE * self._host_total

    def _read_device(
        self, nvml: Any, index: int, handle: Any, driver: str | None
    ) -> tuple[GpuSnapshot, bool]:
        dev = _Device(nvml, handle)
        name = dev.ask("name", "nvmlDeviceGetName")
        uuid = dev.ask("uuid", "nvmlDeviceGetUUID")
        util = dev.ask("utilisation", "nvmlDeviceGetUtilizationRates")
        sm, mem = nvml.NVML_CLOCK_SM, nvml.NVML_CLOCK_MEM
        power_mw = dev.ask("power_w", "nvmlDeviceGetPowerUsage")
        limit_mw = dev.ask("power_limit_w", "nvmlDeviceGetEnforcedPowerLimit")
        pstate = dev.ask("pstate", "nvmlDeviceGetPerformanceState")
        reasons_fn = (
            "nvmlDeviceGetCurrentClocksEventReasons"
            if hasattr(nvml, "nvmlDeviceGetCurrentClocksEventReasons")
            else "nvmlDeviceGetCurrentClocksThrottleReasons"
        )
        reasons = dev.ask("clock_event_reasons", reasons_fn)
        memory = self._memory(dev)
        snapshot = GpuSnapshot(
            index=index,
            name=None if name is None else _text(name),
            uuid=None if uuid is None else _text(uuid),
            driver_version=driver,
            utilisation_gpu=None if util is None else int(util.gpu),
            utilisation_memory=None if util is None else int(util.memory),
            sm_clock_mhz=dev.ask("sm_clock_mhz", "nvmlDeviceGetClockInfo", sm),
            sm_clock_max_mhz=dev.ask("sm_clock_max_mhz", "nvmlDeviceGetMaxClockInfo", sm),
            mem_clock_mhz=dev.ask("mem_clock_mhz", "nvmlDeviceGetClockInfo", mem),
            mem_clock_max_mhz=dev.ask("mem_clock_max_mhz", "nvmlDeviceGetMaxClockInfo", mem),
            power_w=None if power_mw is None else power_mw / 1000.0,
            power_limit_w=None if limit_mw is None else limit_mw / 1000.0,
            temperature_c=dev.ask(
                "temperature_c", "nvmlDeviceGetTemperature", nvml.NVML_TEMPERATURE_GPU
            ),
            pstate=None if pstate in (None, _PSTATE_UNKNOWN) else int(pstate),
            clock_event_reasons=None if reasons is None else decode_clock_event_reasons(reasons),
            memory_total=None if memory is None else int(memory.total),
            memory_used=None if memory is None else int(memory.used),
            fan_percent=dev.ask("fan_percent", "nvmlDeviceGetFanSpeed"),
            processes=self._processes(dev),
            errors=tuple(dev.errors),
        )
        return snapshot, "memory" in dev.unsupported

    @staticmethod
    def _memory(dev: _Device) -> Any:
        # v2 first: v1's "used" counts the driver's reserved memory (615 MiB on an idle H200,
        # seen in the recording), so only v2 matches nvidia-smi. v1 stays as the fallback for
        # old drivers and bindings, and for a driver that answers only v1 (a GB10 might).
        v2 = getattr(dev.nvml, "nvmlMemory_v2", None)
        if v2 is not None:
            try:
                return dev.nvml.nvmlDeviceGetMemoryInfo(dev.handle, version=v2)
            except TypeError:
                pass  # bindings older than the version argument
            except dev.nvml.NVMLError:
                pass  # v1 below says whether it is NOT_SUPPORTED or broken
        return dev.ask("memory", "nvmlDeviceGetMemoryInfo")

    @staticmethod
    def _processes(dev: _Device) -> tuple[tuple[int, int | None], ...] | None:
        # Per-process memory works on a GB10 even though device memory info does not, so it
        # is the one NVML view of who holds GPU memory there.
        compute = dev.ask("processes", "nvmlDeviceGetComputeRunningProcesses")
        graphics = dev.ask("processes", "nvmlDeviceGetGraphicsRunningProcesses")
        if compute is None and graphics is None:
            return None
        seen: dict[int, int | None] = {}
        for proc in [*(compute or ()), *(graphics or ())]:
            used = proc.usedGpuMemory  # pynvml turns NVML's "not available" into None
            seen.setdefault(int(proc.pid), None if used is None else int(used))
        return tuple(seen.items())

    def close(self) -> None:
        """Shut NVML down; a later read() starts it again."""
        nvml, self._nvml, self._failure = self._nvml, None, None
        if nvml is not None:
            try:
                nvml.nvmlShutdown()
            except nvml.NVMLError:
                pass

    def __enter__(self) -> NvmlReader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def gpu_process_pids(reading: GpuReading) -> set[int] | None:
    """Host PIDs NVML lists as running on any GPU; None when NVML cannot tell (no driver, or
    process lists unsupported), which is different from an empty set."""
    if not reading.gpus:
        return None
    lists = [gpu.processes for gpu in reading.gpus]
    if all(found is None for found in lists):
        return None
    return {pid for found in lists if found for pid, _ in found}


def nvml_pids() -> set[int] | None:
    """GPU process PIDs from NVML now, or None where NVML cannot tell (no driver here)."""
    with NvmlReader() as reader:
        return gpu_process_pids(reader.read())


@dataclass(frozen=True)
class GpuPresence:
    available: bool
    name: str | None = None
    driver: str | None = None
    count: int = 0
    reason: str | None = None

    def describe(self) -> str:
        if self.available:
            return f"{self.name} (driver {self.driver}, {self.count} GPU(s))"
        return f"no GPU: {self.reason}"


def gpu_presence() -> GpuPresence:
    """Is there an NVIDIA GPU that NVML can talk to? Asks NVML once; any failure becomes a
    reason, never an exception."""
    pynvml = _load_pynvml()
    if isinstance(pynvml, str):
        return GpuPresence(False, reason=pynvml)
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError as exc:
        return GpuPresence(False, reason=f"no NVIDIA driver (NVML: {exc})")
    try:
        count = pynvml.nvmlDeviceGetCount()
        name = (
            _text(pynvml.nvmlDeviceGetName(pynvml.nvmlDeviceGetHandleByIndex(0))) if count else None
        )
        driver = _text(pynvml.nvmlSystemGetDriverVersion())
        return GpuPresence(count > 0, name, driver, count, None if count else "NVML found no GPU")
    except pynvml.NVMLError as exc:
        return GpuPresence(False, reason=f"NVML error: {exc}")
    finally:
        try:
            pynvml.nvmlShutdown()
        except pynvml.NVMLError:
            pass
