"""One reading of the whole machine per tick: unified memory, PSI, NVML GPUs, Spark power rails.

`TelemetrySampler.sample()` is the loop body the UI's sampling worker and `sparkdeck
telemetry` both call. It never raises for a missing part: each reader's typed error becomes
that part's `*_error` text, so a box without PSI, a driver or the hwmon module still gets the
rest. `History` keeps the last few minutes of chosen figures for the sparklines.
"""

from __future__ import annotations

import bisect
import dataclasses
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from sparkdeck.host.hwmon import HwmonError, PowerRail, read_spark_rails
from sparkdeck.host.meminfo import MemInfoError, MemorySnapshot, read_meminfo
from sparkdeck.host.nvml import GpuReading, NvmlReader
from sparkdeck.host.psi import PsiError, PsiRates, PsiSnapshot, read_pressure, stall_rates
from sparkdeck.host.throttle import reading_verdicts
from sparkdeck.host.ticks import until_next_tick

HISTORY_SECONDS = 300.0
# one series of a History handed to the UI: (taken_at, value) pairs, oldest first
Series = tuple[tuple[float, float], ...]


@dataclass(frozen=True)
class TelemetrySnapshot:
    """Everything the memory, pressure and GPU panels show, read at `taken_at` (monotonic)."""

    taken_at: float
    memory: MemorySnapshot | None
    memory_error: str | None
    pressure: PsiSnapshot | None
    pressure_rates: PsiRates | None  # None on the first sample: a rate needs two readings
    pressure_error: str | None
    gpu: GpuReading
    rails: tuple[PowerRail, ...]
    rails_error: str | None

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict (bytes, percent, watts, MHz as the readers give them)."""
        data = dataclasses.asdict(self)
        if self.memory is not None:
            data["memory"].update(used=self.memory.used, page_cache=self.memory.page_cache)
        # each GPU's throttle verdict (sparkdeck.host.throttle), so scripts need not re-derive it
        for gpu, verdict in zip(data["gpu"]["gpus"], reading_verdicts(self.gpu), strict=False):
            gpu["throttle"] = list(verdict.kinds)
        return data


class TelemetrySampler:
    """Reads every part once per `sample()`; keeps the previous PSI reading for the rate.

    Readers come in as callables so tests can hand in fixed /proc text and an NVML replay.
    """

    def __init__(
        self,
        *,
        memory: Callable[[], MemorySnapshot] = read_meminfo,
        pressure: Callable[[], PsiSnapshot] = read_pressure,
        gpu: NvmlReader | None = None,
        rails: Callable[[], tuple[PowerRail, ...]] = read_spark_rails,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._memory = memory
        self._pressure = pressure
        self._gpu = gpu if gpu is not None else NvmlReader()
        self._rails = rails
        self._clock = clock
        self._last_pressure: PsiSnapshot | None = None
        self._lock = threading.Lock()  # a loop being replaced may still be mid-sample

    def run(
        self,
        history: History,
        period: Callable[[], float],
        emit: Callable[[TelemetrySnapshot, dict[str, Series]], object],
        stop: threading.Event,
        keep_going: Callable[[], bool] = lambda: True,
    ) -> None:
        """The sampling loop a front end runs in a thread: sample, add to `history`, hand
        both to `emit`, wait `period()` seconds; until `stop` is set or `keep_going()` says
        no. Two loops (an old one ending, its faster replacement starting) never sample at
        once: PSI rates come from consecutive readings."""
        while not stop.is_set() and keep_going():
            began = time.monotonic()
            with self._lock:
                snapshot = self.sample()
                history.add(snapshot)
                frozen = history.frozen()
            emit(snapshot, frozen)
            stop.wait(until_next_tick(period(), began))  # the shared ticks: host.ticks says why

    def sample(self) -> TelemetrySnapshot:
        taken_at = self._clock()
        memory, memory_error = None, None
        try:
            memory = self._memory()
        except MemInfoError as exc:
            memory_error = str(exc)
        pressure, rates, pressure_error = None, None, None
        try:
            pressure = self._pressure()
        except PsiError as exc:
            pressure_error = str(exc)
        else:
            if self._last_pressure is not None:
                rates = stall_rates(self._last_pressure, pressure)
            self._last_pressure = pressure
        rails: tuple[PowerRail, ...] = ()
        rails_error = None
        try:
            rails = self._rails()
        except HwmonError as exc:
            rails_error = str(exc)
        return TelemetrySnapshot(
            taken_at,
            memory,
            memory_error,
            pressure,
            rates,
            pressure_error,
            self._gpu.read(),
            rails,
            rails_error,
        )

    def close(self) -> None:
        self._gpu.close()


# ----- history for the sparklines ---------------------------------------------------------


def _memory_used_pct(s: TelemetrySnapshot) -> float | None:
    return 100.0 * s.memory.used / s.memory.total if s.memory and s.memory.total else None


def _psi_some(s: TelemetrySnapshot) -> float | None:
    return s.pressure_rates.some_pct if s.pressure_rates else None


def _psi_full(s: TelemetrySnapshot) -> float | None:
    return s.pressure_rates.full_pct if s.pressure_rates else None


def _gpu_util(s: TelemetrySnapshot) -> float | None:
    gpu = s.gpu.gpus[0] if s.gpu.gpus else None
    return None if gpu is None or gpu.utilisation_gpu is None else float(gpu.utilisation_gpu)


def _gpu_power(s: TelemetrySnapshot) -> float | None:
    gpu = s.gpu.gpus[0] if s.gpu.gpus else None
    return None if gpu is None else gpu.power_w


SERIES: dict[str, Callable[[TelemetrySnapshot], float | None]] = {
    "memory_used_pct": _memory_used_pct,
    "psi_some_pct": _psi_some,
    "psi_full_pct": _psi_full,
    "gpu_util_pct": _gpu_util,
    "gpu_power_w": _gpu_power,
}


class History:
    """The last `seconds` of each series, by sample time; a missing value is left out.

    Time-based rather than count-based, so 2 Hz sampling while an engine starts does not
    shorten the window the sparklines cover.
    """

    def __init__(self, seconds: float = HISTORY_SECONDS) -> None:
        self.seconds = seconds
        self._points: dict[str, deque[tuple[float, float]]] = {name: deque() for name in SERIES}

    def add(self, snapshot: TelemetrySnapshot) -> None:
        cutoff = snapshot.taken_at - self.seconds
        for name, pick in SERIES.items():
            points = self._points[name]
            value = pick(snapshot)
            if value is not None:
                if points and snapshot.taken_at < points[-1][0]:
                    # older than the newest (the service's feed and the window's own
                    # sampling overlap at a handover): into its place, so oldest first holds
                    points.insert(
                        bisect.bisect(points, (snapshot.taken_at, value)),
                        (snapshot.taken_at, value),
                    )
                else:
                    points.append((snapshot.taken_at, value))
            while points and points[0][0] < cutoff:
                points.popleft()

    def extend(self, snapshots: Iterable[TelemetrySnapshot]) -> None:
        for snapshot in snapshots:
            self.add(snapshot)

    def frozen(self) -> dict[str, Series]:
        """Every series' (taken_at, value) points, oldest first, as a copy safe to hand to
        another thread (the sparklines place them on the clock: view.clock_spark_text)."""
        return {name: tuple(points) for name, points in self._points.items()}

    def values(self, name: str) -> list[float]:
        return [value for _, value in self._points[name]]

    def span(self, name: str) -> float:
        """Seconds between the oldest and newest point kept for `name`."""
        points = self._points[name]
        return points[-1][0] - points[0][0] if len(points) > 1 else 0.0
