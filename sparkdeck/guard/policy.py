"""The watchdog's decision over a window of readings: ok, warn, or stop the engine.

Warn when MemAvailable falls under `warn_available_pct` of MemTotal or PSI `some` avg10 rises
over `warn_some_avg10`. Stop when MemAvailable falls under `stop_available_pct`, or when the
`full` stall rate, computed from the `total` counter between consecutive readings, exceeds
`stop_full_rate_pct` for `stop_consecutive` intervals in a row. The rate reacts within one
sampling interval where avg10 lags by seconds; requiring consecutive intervals keeps one noisy
spike from killing a healthy engine. The policy is pure: the same window gives the same
decision, which is what lets tests replay recorded windows.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass

from sparkdeck.config.settings import GuardSettings
from sparkdeck.guard.readings import Reading, rates

OK, WARN, STOP = "ok", "warn", "stop"


@dataclass(frozen=True)
class Decision:
    """What the policy concluded from the newest reading (and the window before it)."""

    level: str  # ok, warn or stop (stop only in "stop" mode)
    reasons: tuple[str, ...]
    reading: Reading
    full_rate_pct: float | None  # over the newest interval; None without PSI
    stop_conditions_met: bool  # True also in warn-only mode, where nothing is stopped

    def describe(self) -> str:
        r = self.reading
        rate = "n/a" if self.full_rate_pct is None else f"{self.full_rate_pct:.1f} %"
        some = "n/a" if r.psi is None else f"{r.psi.some.avg10:.1f}"
        head = (
            f"{self.level.upper():4} MemAvailable {r.available_pct:.1f} % "
            f"({r.memory.available / 2**30:.1f} GiB), PSI some avg10 {some}, "
            f"full stall rate {rate}"
        )
        return head + (": " + "; ".join(self.reasons) if self.reasons else "")

    def to_dict(self) -> dict[str, object]:
        return {
            "level": self.level,
            "reasons": list(self.reasons),
            "full_rate_pct": self.full_rate_pct,
            "stop_conditions_met": self.stop_conditions_met,
            "reading": self.reading.to_dict(),
            "text": self.describe(),
        }


class WatchdogPolicy:
    """Thresholds from settings.toml applied to a window of readings, oldest first."""

    def __init__(self, guard: GuardSettings):
        self.guard = guard

    def full_rates(self, window: Sequence[Reading]) -> list[float | None]:
        """The full stall rate over each interval in the window (one fewer than readings)."""
        return [
            None if r is None else r.full_pct
            for r in (rates(a, b) for a, b in itertools.pairwise(window))
        ]

    def decide(self, window: Sequence[Reading], interval_s: float = 0.0) -> Decision:
        """The level for the newest reading. `interval_s`: the configured sampling period;
        the full-stall rule counts intervals at least that long, so readings taken faster
        (the watchdog's warn band) do not let a burst shorter than `stop_consecutive`
        periods stop the engine."""
        if not window:
            raise ValueError("the watchdog needs at least one reading")
        g = self.guard
        newest = window[-1]
        n = g.stop_consecutive
        recent = self.full_rates(spaced(window, interval_s, n + 1))
        rate = recent[-1] if recent else None
        stop: list[str] = []
        warn: list[str] = []
        if newest.available_pct < g.stop_available_pct:
            stop.append(f"MemAvailable {newest.available_pct:.1f} % < {g.stop_available_pct:g} %")
        if len(recent) == n and all(r is not None and r > g.stop_full_rate_pct for r in recent):
            shown = ", ".join(f"{r:.1f}" for r in recent if r is not None)
            stop.append(f"full stall rate > {g.stop_full_rate_pct:g} % for {n} samples ({shown})")
        if newest.available_pct < g.warn_available_pct:
            warn.append(f"MemAvailable {newest.available_pct:.1f} % < {g.warn_available_pct:g} %")
        if newest.psi is not None and newest.psi.some.avg10 > g.warn_some_avg10:
            warn.append(f"PSI some avg10 {newest.psi.some.avg10:.1f} > {g.warn_some_avg10:g}")
        if stop and g.mode == "stop":
            return Decision(STOP, tuple(stop), newest, rate, True)
        if stop:
            return Decision(
                WARN, (*stop, "warn-only mode: the engine is NOT stopped"), newest, rate, True
            )
        return Decision(WARN if warn else OK, tuple(warn), newest, rate, False)


def spaced(window: Sequence[Reading], interval_s: float, count: int) -> list[Reading]:
    """The newest `count` readings at least ~interval_s apart, oldest first: the newest
    reading, then going back each one about a period older than the one picked after it
    (10 % slack: readings of a 1 Hz loop come 0.95-1.05 s apart)."""
    readings = list(window)
    if interval_s <= 0:
        return readings[-count:]
    picked = [readings[-1]]
    for reading in reversed(readings[:-1]):
        if len(picked) == count:
            break
        if picked[-1].t - reading.t >= 0.9 * interval_s:
            picked.append(reading)
    return picked[::-1]
