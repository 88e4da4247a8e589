"""What happened before the last unclean end: a plain verdict from the recorded rows.

Pure logic over `RecordedSample`s (the last ten minutes before the recording ended): no files,
no clock. The thresholds are the memory guard's own (settings.toml [guard]), so "memory ran
out" here means what the watchdog would have stopped an engine for, and "tight" what it warns
about. The verdict names the worst moment, with the engine's state at that moment, because
"which engine was doing what when memory ran out" is what the owner needs after a reboot.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

from sparkdeck.config.settings import GuardSettings
from sparkdeck.host.meminfo import gib
from sparkdeck.host.throttle import persistent_kinds
from sparkdeck.recorder.rows import RecordedSample

WINDOW_S = 600.0  # the post-mortem looks at the last ten minutes before the end

RAN_OUT = "ran out"
TIGHT = "tight"
NORMAL = "normal"


@dataclass(frozen=True)
class PostMortem:
    """The story of one recording session that ended without its clean-stop mark."""

    session_started_at: float  # wall clock
    ended_at: float | None  # the last row's time; None when nothing was recorded
    rebooted: bool  # the boot id changed: the machine restarted, not just the process
    cause: str
    verdict: str  # the plain sentence(s) a person reads first
    memory: str  # RAN_OUT, TIGHT or NORMAL
    worst_at: float | None
    min_available_bytes: int | None
    max_psi_full_pct: float | None
    max_psi_some_avg10: float | None
    throttle: tuple[str, ...]  # GPU throttle kinds seen in the window
    throttled_rows: int
    rows: int  # rows in the window
    last: RecordedSample | None

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["throttle"] = list(self.throttle)
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> PostMortem:
        last = data.get("last")
        return cls(
            **{
                **data,
                "throttle": tuple(data.get("throttle") or ()),
                "last": RecordedSample(**last) if last else None,
            }
        )

    def text(self) -> str:
        """The post-mortem as a person reads it (the file in the data dir, --last-crash)."""
        started = _stamp(self.session_started_at, full=True)
        ended = "nothing recorded" if self.ended_at is None else _stamp(self.ended_at, True)
        lines = [
            f"sparkdeck post-mortem: the recording started {started} did not end cleanly",
            f"cause: {self.cause}",
            f"last reading: {ended}",
            f"verdict: {self.verdict}",
            f"({self.rows} readings in the {WINDOW_S / 60:.0f} minutes before the end)",
        ]
        return "\n".join(lines)


def _stamp(t: float, full: bool = False) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S" if full else "%H:%M:%S", time.localtime(t))


def _engine(row: RecordedSample) -> str:
    return f"engine {row.engine_state}" if row.engine_state else "no engine running"


def _pct(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.0f} %"


def row_memory_level(row: RecordedSample, guard: GuardSettings) -> str:
    """RAN_OUT at the guard's stop thresholds, TIGHT at its warn thresholds, else NORMAL."""
    available, full = row.available_pct, row.psi_full_pct
    if (available is not None and available < guard.stop_available_pct) or (
        full is not None and full > guard.stop_full_rate_pct
    ):
        return RAN_OUT
    some = row.psi_some_avg10
    if (available is not None and available < guard.warn_available_pct) or (
        some is not None and some > guard.warn_some_avg10
    ):
        return TIGHT
    return NORMAL


def _severity(row: RecordedSample) -> tuple[float, float]:
    """Sort key, worst first: the least memory available, then the most full stall."""
    available = row.available_pct if row.available_pct is not None else 100.0
    return (available, -(row.psi_full_pct or 0.0))


def _reading(row: RecordedSample) -> str:
    available = (
        "MemAvailable n/a"
        if row.mem_available is None
        else (f"MemAvailable {gib(row.mem_available)}")
    )
    text = f"{available} and PSI full {_pct(row.psi_full_pct)}"
    if row.swap_used:
        text += f", swap used {gib(row.swap_used)}"
    return text


def throttled_rows(rows: Sequence[RecordedSample]) -> tuple[list[RecordedSample], list[str]]:
    """The rows in which the GPU was held back, and the kinds seen (a lone "clock stuck low"
    row left out: sparkdeck.host.throttle.persistent_kinds)."""
    throttled: list[RecordedSample] = []
    kinds: list[str] = []
    previous: tuple[str, ...] = ()
    for row in rows:
        seen = tuple(k for k in (row.throttle or "").split(",") if k)
        counted = persistent_kinds(previous, seen)
        previous = seen
        if counted:
            throttled.append(row)
            kinds += [k for k in counted if k not in kinds]
    return throttled, kinds


def judge(
    rows: Sequence[RecordedSample],
    session_started_at: float,
    rebooted: bool,
    guard: GuardSettings = GuardSettings(),
) -> PostMortem:
    """The verdict over the rows of one session (only the last WINDOW_S seconds count)."""
    rows = sorted(rows, key=lambda r: r.t)
    if rows:
        end = rows[-1].t
        rows = [r for r in rows if r.t >= end - WINDOW_S]
    cause = (
        "the machine restarted while sparkdeck was recording (boot id changed): a hard "
        "freeze, a power cut or a forced reset"
        if rebooted
        else "sparkdeck's recorder ended without a clean stop (killed or crashed) while the "
        "machine kept running"
    )
    levels = [(row_memory_level(r, guard), r) for r in rows]
    ran_out = [r for level, r in levels if level == RAN_OUT]
    tight = [r for level, r in levels if level == TIGHT]
    worst: RecordedSample | None = None
    if ran_out:
        memory, worst = RAN_OUT, min(ran_out, key=_severity)
        verdict = f"memory ran out: {_reading(worst)} at {_stamp(worst.t)}, {_engine(worst)}"
    elif tight:
        memory, worst = TIGHT, min(tight, key=_severity)
        verdict = (
            f"memory was tight but did not run out: {_reading(worst)}, PSI some "
            f"{_pct(worst.psi_some_avg10)} at {_stamp(worst.t)}, {_engine(worst)}"
        )
    elif rows:
        memory, last = NORMAL, rows[-1]
        verdict = (
            f"no memory trouble recorded; the last reading was normal "
            f"({_reading(last)} at {_stamp(last.t)}, {_engine(last)})"
        )
    else:
        memory = NORMAL
        verdict = (
            "nothing was recorded in the ten minutes before the end, so there is nothing to judge"
        )
    throttled, kinds = throttled_rows(rows)
    if throttled:
        verdict += (
            f"; the GPU was throttled ({', '.join(kinds)}) in {len(throttled)} of "
            f"{len(rows)} readings, the last at {_stamp(throttled[-1].t)}"
        )
    available = [r.mem_available for r in rows if r.mem_available is not None]
    full = [r.psi_full_pct for r in rows if r.psi_full_pct is not None]
    some = [r.psi_some_avg10 for r in rows if r.psi_some_avg10 is not None]
    return PostMortem(
        session_started_at=session_started_at,
        ended_at=rows[-1].t if rows else None,
        rebooted=rebooted,
        cause=cause,
        verdict=verdict,
        memory=memory,
        worst_at=worst.t if worst else None,
        min_available_bytes=min(available) if available else None,
        max_psi_full_pct=max(full) if full else None,
        max_psi_some_avg10=max(some) if some else None,
        throttle=tuple(kinds),
        throttled_rows=len(throttled),
        rows=len(rows),
        last=rows[-1] if rows else None,
    )
