"""Readings for the guard: the SYNTHETIC recordings of tests/fixtures/guard, and a FAKE
source that is this machine's real readings until told to report a Spark about to run out.
"""

from __future__ import annotations

import json
import time
from dataclasses import replace
from pathlib import Path

from sparkdeck.guard.readings import HostReadings, Reading


class CrossingSource:
    """FAKE reading source: this machine's real readings, with MemAvailable replaced by 3 %
    of MemTotal once `cross()` is called, or from its reading number `after` + 1 on (a Spark
    about to run out). Records when it crossed."""

    def __init__(self, after: int | None = None) -> None:
        self.real = HostReadings()
        self.crossed_at: float | None = None
        self.after, self.served = after, 0

    def cross(self) -> None:
        self.crossed_at = time.monotonic()

    def __call__(self) -> Reading:
        reading = self.real()
        self.served += 1
        if self.after is not None and self.served > self.after and self.crossed_at is None:
            self.cross()
        if self.crossed_at is None:
            return reading
        low = int(reading.memory.total * 0.03)
        return replace(reading, memory=replace(reading.memory, available=low, free=low))


GUARD_FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "guard"


def recording(name: str) -> tuple[dict, list[Reading]]:
    data = json.loads((GUARD_FIXTURES / f"{name}.json").read_text())
    assert data["source"].startswith("synthetic")
    return data, [Reading.from_dict(r) for r in data["readings"]]
