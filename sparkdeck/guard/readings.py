"""One guard reading: unified memory and memory pressure at one moment.

The watchdog, the start-up timeline and the switch wait all work on these. They are frozen,
and turn into and back from plain dicts so windows of them can be recorded to the data dir
and replayed in tests.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from sparkdeck.host.meminfo import MemorySnapshot, read_meminfo
from sparkdeck.host.psi import PsiError, PsiLine, PsiRates, PsiSnapshot, read_pressure, stall_rates

_MEMORY_KEYS = ("total", "available", "free", "cached", "buffers", "swap_total", "swap_free")


@dataclass(frozen=True)
class Reading:
    """Memory and PSI (None when the kernel has none) read at monotonic time `t`."""

    t: float
    memory: MemorySnapshot
    psi: PsiSnapshot | None

    @property
    def available_pct(self) -> float:
        return 100.0 * self.memory.available / self.memory.total

    def to_dict(self) -> dict[str, Any]:
        data: dict[str, Any] = {"t": round(self.t, 3)}
        data.update({k: getattr(self.memory, k) for k in _MEMORY_KEYS})
        if self.psi is not None:
            data.update(
                {
                    "some_avg10": self.psi.some.avg10,
                    "full_avg10": self.psi.full.avg10,
                    "some_total_us": self.psi.some.total_us,
                    "full_total_us": self.psi.full.total_us,
                }
            )
        return data

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Reading:
        memory = MemorySnapshot(**{k: int(data.get(k, 0)) for k in _MEMORY_KEYS})
        psi = None
        if "full_total_us" in data:

            def line(kind: str) -> PsiLine:
                return PsiLine(
                    float(data[f"{kind}_avg10"]), 0.0, 0.0, int(data[f"{kind}_total_us"])
                )

            psi = PsiSnapshot(line("some"), line("full"), float(data["t"]))
        return cls(float(data["t"]), memory, psi)


def rates(before: Reading, after: Reading) -> PsiRates | None:
    """PSI stall rates between two readings (None without PSI or with a reset counter)."""
    if before.psi is None or after.psi is None:
        return None
    return stall_rates(before.psi, after.psi)


class HostReadings:
    """Reads /proc/meminfo and /proc/pressure/memory together.

    A kernel without PSI still gets memory readings (psi None, and the watchdog says its
    pressure rule is off); a broken /proc/meminfo raises MemInfoError to the caller.
    """

    def __init__(
        self,
        read_memory: Callable[[], MemorySnapshot] = read_meminfo,
        read_psi: Callable[..., PsiSnapshot] = read_pressure,
        clock: Callable[[], float] = time.monotonic,
    ):
        self.read_memory = read_memory
        self.read_psi = read_psi
        self.clock = clock
        self.psi_error: str | None = None

    def __call__(self) -> Reading:
        now = self.clock()
        memory = self.read_memory()
        try:
            psi: PsiSnapshot | None = self.read_psi(monotonic=now)
        except PsiError as exc:
            self.psi_error, psi = str(exc), None
        return Reading(now, memory, psi)
