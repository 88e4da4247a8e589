"""Memory, pressure and GPU throttling while a benchmark runs: what the run cost the host.

A thread reads /proc/meminfo and /proc/pressure/memory a few times a second and keeps the
extremes (peak used, lowest MemAvailable, highest PSI some/full) for the run's record. It
also reads NVML and counts the samples in which a GPU was held back (thermal, power cap,
hardware slowdown, clock stuck low: sparkdeck.host.throttle), so a result measured on a
throttled GPU says so.
Stopping a run that endangers the host is the guard's watchdog's job (see
sparkdeck.bench.target), which runs beside it at the guard's own rate and thresholds.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, replace
from typing import Any, TypeVar

from sparkdeck.host.meminfo import MemInfoError, MemorySnapshot, read_meminfo
from sparkdeck.host.nvml import GpuReading, NvmlReader
from sparkdeck.host.psi import PsiError, PsiRates, PsiSnapshot, read_pressure, stall_rates
from sparkdeck.host.throttle import order_kinds, persistent_kinds, throttle_kinds


@dataclass(frozen=True)
class ResourceSample:
    """One reading; a part the host cannot give is None."""

    monotonic: float
    memory: MemorySnapshot | None
    pressure: PsiSnapshot | None
    rates: PsiRates | None
    gpu: GpuReading | None = None


@dataclass(frozen=True)
class ResourcePeaks:
    """The extremes over a run; None where nothing was read (e.g. a kernel without PSI)."""

    samples: int = 0
    peak_used_bytes: int | None = None
    min_available_bytes: int | None = None
    total_bytes: int | None = None
    max_some_avg10: float | None = None
    max_full_avg10: float | None = None
    max_some_rate_pct: float | None = None
    max_full_rate_pct: float | None = None
    problems: tuple[str, ...] = ()
    gpu_samples: int = 0  # samples in which NVML saw at least one GPU
    throttled_samples: int = 0  # of those, how many had a GPU held back
    throttle: tuple[str, ...] = ()  # the kinds seen (sparkdeck.host.throttle), most urgent first
    last_kinds: tuple[str, ...] = ()  # the previous sample's kinds (for the stuck-low rule)

    def to_dict(self) -> dict[str, Any]:
        data = {**asdict(self), "problems": list(self.problems), "throttle": list(self.throttle)}
        del data["last_kinds"]
        return data


Figure = TypeVar("Figure", int, float)


def _hi(old: Figure | None, new: Figure | None) -> Figure | None:
    return new if old is None else old if new is None else max(old, new)


def _lo(old: Figure | None, new: Figure | None) -> Figure | None:
    return new if old is None else old if new is None else min(old, new)


def fold(peaks: ResourcePeaks, sample: ResourceSample) -> ResourcePeaks:
    """The extremes with one more sample taken into account."""
    mem, psi, rates = sample.memory, sample.pressure, sample.rates
    gpu = sample.gpu
    seen = throttle_kinds(gpu) if gpu is not None else ()
    kinds = persistent_kinds(peaks.last_kinds, seen)  # a lone "stuck low" is a ramp-up
    return replace(
        peaks,
        samples=peaks.samples + 1,
        peak_used_bytes=_hi(peaks.peak_used_bytes, mem.used if mem else None),
        min_available_bytes=_lo(peaks.min_available_bytes, mem.available if mem else None),
        total_bytes=mem.total if mem else peaks.total_bytes,
        max_some_avg10=_hi(peaks.max_some_avg10, psi.some.avg10 if psi else None),
        max_full_avg10=_hi(peaks.max_full_avg10, psi.full.avg10 if psi else None),
        max_some_rate_pct=_hi(peaks.max_some_rate_pct, rates.some_pct if rates else None),
        max_full_rate_pct=_hi(peaks.max_full_rate_pct, rates.full_pct if rates else None),
        gpu_samples=peaks.gpu_samples + (1 if gpu is not None and gpu.gpus else 0),
        throttled_samples=peaks.throttled_samples + (1 if kinds else 0),
        throttle=order_kinds((*peaks.throttle, *kinds)),
        last_kinds=seen,
    )


class ResourceSampler:
    """Samples in a daemon thread until stopped.

    The readers are parameters so a test can feed a Spark-sized memory picture (a fake,
    since no Spark is here) or an NVML replay while the thread and the folding stay the real
    ones. The NVML reader (its own, unless one is given) is closed by `stop()`.
    """

    def __init__(
        self,
        hz: float = 4.0,
        read_memory: Callable[[], MemorySnapshot] = read_meminfo,
        read_psi: Callable[[], PsiSnapshot] = read_pressure,
        gpu: NvmlReader | None = None,
    ):
        self.interval = 1.0 / hz
        self._read_memory, self._read_psi = read_memory, read_psi
        self._gpu = gpu if gpu is not None else NvmlReader()
        self._peaks = ResourcePeaks()
        self._previous_psi: PsiSnapshot | None = None
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="bench-sampler", daemon=True)

    def sample_once(self) -> ResourceSample:
        problems = list(self._peaks.problems)
        memory = pressure = rates = None
        try:
            memory = self._read_memory()
        except MemInfoError as exc:
            problems.append(str(exc))
        try:
            pressure = self._read_psi()
            if self._previous_psi is not None:
                rates = stall_rates(self._previous_psi, pressure)
            self._previous_psi = pressure
        except PsiError as exc:
            problems.append(str(exc))
        # NVML never raises; no driver is an empty reading, not a problem for the record
        sample = ResourceSample(time.monotonic(), memory, pressure, rates, self._gpu.read())
        # one line per distinct problem: a missing PSI file is not news four times a second
        self._peaks = replace(fold(self._peaks, sample), problems=tuple(dict.fromkeys(problems)))
        return sample

    def _loop(self) -> None:
        while True:
            self.sample_once()
            if self._done.wait(self.interval):
                return

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> ResourcePeaks:
        """End sampling (with one last reading) and return the extremes seen."""
        self._done.set()
        if self._thread.is_alive():
            self._thread.join(timeout=5.0)
        self.sample_once()
        self._gpu.close()
        return self._peaks

    @property
    def peaks(self) -> ResourcePeaks:
        return self._peaks
