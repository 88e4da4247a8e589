"""The start-up timeline: memory from launch to ready, with phases marked from log lines.

Memory is sampled at the guard's start-up rate; phases (weights loading, KV-cache
allocation, CUDA graph capture, ready) come from the first log line matching each of the
engine kind's `startup_phases` patterns. Times are seconds since the container started.

Whoever runs a launch (a window, the CLI, the service) saves its timeline in the launch's
record (sparkdeck.guard.records); `latest_recorded` reads the newest one back, so a window can
draw the start-up of a launch it did not run itself.
"""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sparkdeck.guard.readings import Reading


@dataclass(frozen=True)
class TimelinePoint:
    t: float  # seconds since launch
    available: int
    used: int


@dataclass(frozen=True)
class PhaseMark:
    t: float
    phase: str
    line: str


@dataclass(frozen=True)
class StartupTimeline:
    """What a start-up looked like; saved with the launch record and drawn in the TUI."""

    points: tuple[TimelinePoint, ...]
    marks: tuple[PhaseMark, ...]
    total: int  # MemTotal, so a chart can scale without another reading

    @property
    def peak_used(self) -> int:
        return max((p.used for p in self.points), default=0)

    def to_dict(self) -> dict[str, Any]:
        return {
            "total": self.total,
            "points": [[round(p.t, 3), p.available, p.used] for p in self.points],
            "marks": [{"t": round(m.t, 3), "phase": m.phase, "line": m.line} for m in self.marks],
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> StartupTimeline:
        return cls(
            tuple(TimelinePoint(float(t), int(a), int(u)) for t, a, u in data["points"]),
            tuple(PhaseMark(float(m["t"]), m["phase"], m["line"]) for m in data["marks"]),
            int(data["total"]),
        )


def mark_phases(
    lines: Iterable[tuple[float, str]], patterns: Sequence[tuple[str, str]]
) -> list[PhaseMark]:
    """The first line matching each phase, as (seconds since launch, line) pairs in order."""
    compiled = [(phase, re.compile(rx, re.IGNORECASE)) for phase, rx in patterns]
    marks: dict[str, PhaseMark] = {}
    for t, line in lines:
        for phase, rx in compiled:
            if phase not in marks and rx.search(line):
                marks[phase] = PhaseMark(t, phase, line.strip()[:200])
    return sorted(marks.values(), key=lambda m: m.t)


class TimelineRecorder:
    """Collects points from the sampler thread; `timeline()` freezes what was collected."""

    def __init__(self, started: float):
        self.started = started
        self._points: list[TimelinePoint] = []
        self._total = 0
        self._lock = threading.Lock()

    def add(self, reading: Reading) -> None:
        point = TimelinePoint(
            reading.t - self.started, reading.memory.available, reading.memory.used
        )
        with self._lock:
            self._points.append(point)
            self._total = reading.memory.total

    def timeline(self, marks: Sequence[PhaseMark] = ()) -> StartupTimeline:
        with self._lock:
            return StartupTimeline(tuple(self._points), tuple(marks), self._total)


@dataclass(frozen=True)
class RecordedStartup:
    """A start-up timeline as a launch record keeps it, with the launch it belongs to."""

    preset_id: str
    container_name: str
    saved_at: float  # the record's modification time (time.time() clock)
    timeline: StartupTimeline


def latest_recorded(launches: Path) -> RecordedStartup | None:
    """The newest launch record in `launches` that holds a start-up timeline (an adopted
    engine's record has none); None when there is none. A record that cannot be read or
    parsed (being replaced, damaged, of another version) is passed over: the chart then
    shows the newest one that can be, never an error."""
    found = []
    for path in launches.glob("*.json"):  # none when there is no launches dir yet
        try:
            found.append((path.stat().st_mtime, path))
        except OSError:  # dropped while it was listed (its container is gone)
            continue
    for saved_at, path in sorted(found, reverse=True):
        try:
            data = json.loads(path.read_text())
            if not isinstance(data, dict) or not isinstance(data.get("timeline"), dict):
                continue
            return RecordedStartup(
                str(data.get("preset_id") or "?"),
                str(data.get("container_name") or path.stem[:12]),
                saved_at,
                StartupTimeline.from_dict(data["timeline"]),
            )
        except (OSError, ValueError, TypeError, KeyError):
            continue
    return None
