"""Reading a flight recording while it is written: `sparkdeck history` and, later, the TUI.

Read-only connections (WAL lets them read beside the recording process); rows come back as
`RecordedSample`s, post-mortems as `PostMortem`s. A window is summarised into at most N lines
by keeping the worst reading of each slice (least MemAvailable, most stall), so a short dip
is never averaged away.
"""

from __future__ import annotations

import json
import re
import sqlite3
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from sparkdeck.recorder.postmortem import PostMortem, throttled_rows
from sparkdeck.recorder.rows import COLUMNS, RecordedSample, from_row
from sparkdeck.recorder.store import RecorderError, connect

_DURATION = re.compile(r"(\d+(?:\.\d+)?)\s*([smhd]?)")
_UNIT_S = {"": 1.0, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}


def parse_duration(text: str) -> float:
    """ "90s", "10m", "2h", "7d" (or plain seconds) -> seconds; ValueError otherwise."""
    found = _DURATION.fullmatch(text.strip().lower())
    if not found or float(found.group(1)) <= 0:
        raise ValueError(f"not a duration: {text!r} (use e.g. 90s, 10m, 2h, 7d)")
    return float(found.group(1)) * _UNIT_S[found.group(2)]


def _open(path: Path) -> sqlite3.Connection:
    if not path.exists():
        raise RecorderError(
            f"no flight recording at {path} yet: the sparkdeck service "
            "records once it runs (sparkdeck service start)"
        )
    return connect(path, read_only=True)


def rows_between(path: Path, start: float, end: float | None = None) -> list[RecordedSample]:
    """Rows with start <= t (<= end), oldest first."""
    db = _open(path)
    try:
        sql = f"SELECT {', '.join(COLUMNS)} FROM samples WHERE t >= ?"
        args: tuple[float, ...] = (start,)
        if end is not None:
            sql, args = sql + " AND t <= ?", (start, end)
        return [from_row(r) for r in db.execute(sql + " ORDER BY t", args)]
    except sqlite3.Error as exc:
        raise RecorderError(f"{path}: cannot read the flight recording ({exc})") from None
    finally:
        db.close()


def last_postmortem(path: Path) -> tuple[PostMortem, str] | None:
    """The newest post-mortem and the file it was written to; None if there is none."""
    db = _open(path)
    try:
        found = db.execute(
            "SELECT report, file FROM postmortems ORDER BY id DESC LIMIT 1"
        ).fetchone()
    except sqlite3.Error as exc:
        raise RecorderError(f"{path}: cannot read the flight recording ({exc})") from None
    finally:
        db.close()
    if found is None:
        return None
    return PostMortem.from_dict(json.loads(found[0])), found[1]


@dataclass(frozen=True)
class WindowSummary:
    """The extremes of a window of rows, each with when it was seen."""

    rows: int
    first_t: float | None
    last_t: float | None
    min_available: RecordedSample | None
    max_psi_full: RecordedSample | None
    throttled_rows: int
    throttle: tuple[str, ...]


def summarise(rows: Sequence[RecordedSample]) -> WindowSummary:
    with_mem = [r for r in rows if r.mem_available is not None]
    with_psi = [r for r in rows if r.psi_full_pct is not None]
    throttled, kinds = throttled_rows(rows)
    return WindowSummary(
        rows=len(rows),
        first_t=rows[0].t if rows else None,
        last_t=rows[-1].t if rows else None,
        min_available=min(with_mem, key=lambda r: r.mem_available or 0) if with_mem else None,
        max_psi_full=max(with_psi, key=lambda r: r.psi_full_pct or 0.0) if with_psi else None,
        throttled_rows=len(throttled),
        throttle=tuple(kinds),
    )


def worst_per_slice(rows: Sequence[RecordedSample], lines: int) -> list[RecordedSample]:
    """At most `lines` rows: of each consecutive slice, the one with the least MemAvailable
    (then the most PSI full), so a dip shows however long the window."""
    if len(rows) <= lines:
        return list(rows)
    step = len(rows) / lines
    picked = []
    for i in range(lines):
        part = rows[int(i * step) : max(int(i * step) + 1, int((i + 1) * step))]
        picked.append(
            min(
                part,
                key=lambda r: (
                    r.mem_available if r.mem_available is not None else 2**63,
                    -(r.psi_full_pct or 0.0),
                ),
            )
        )
    return picked
