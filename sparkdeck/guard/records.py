"""What the guard writes to the data dir: launch records and watchdog actions.

A launch record keeps MemAvailable before the launch (the safe switch waits for memory to
come back to it) and the start-up timeline. A returning record is left by a stop that did not
wait for memory (`sparkdeck stop`, the TUI's stop): the next launch waits on it, since the
stopped engine's memory may still be on its way back. An action record keeps the decision
and the last 60 s of readings, so a stop can be understood afterwards. All writes are atomic.
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sparkdeck import paths
from sparkdeck.guard.policy import Decision
from sparkdeck.guard.readings import Reading


def launches_dir() -> Path:
    return paths.data_dir() / "launches"


def returning_dir() -> Path:
    return paths.data_dir() / "returning"


def actions_dir() -> Path:
    return paths.data_dir() / "guard-actions"


def _stamp() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S%z")


def save_launch_record(container_name: str, record: dict[str, Any]) -> Path:
    """Write (or replace) the record of the launch that created `container_name`."""
    path = launches_dir() / f"{container_name}.json"
    paths.atomic_write_text(path, json.dumps({**record, "saved_at": _stamp()}, indent=1),
                            mode=0o644)
    return path


def load_launch_record(container_name: str) -> dict[str, Any] | None:
    """The record, or None when there is none or it cannot be read (then nothing is known)."""
    try:
        data = json.loads((launches_dir() / f"{container_name}.json").read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


@dataclass(frozen=True)
class Returning:
    """Memory an engine was stopped with and may not have given back yet."""

    container_name: str
    label: str  # what to call it on screen: its preset id
    available_before: int  # MemAvailable before that engine was launched
    stopped_at: float  # wall clock (time.time()): the record outlives the process
    pids: tuple[int, ...]  # the engine's host PIDs, for NVML's listing


def save_returning(container_name: str, label: str, available_before: int,
                   pids: Sequence[int], stopped_at: float | None = None) -> Path:
    path = returning_dir() / f"{container_name}.json"
    paths.atomic_write_text(path, json.dumps({
        "label": label, "available_before": available_before, "pids": sorted(pids),
        "stopped_at": time.time() if stopped_at is None else stopped_at}), mode=0o644)
    return path


def load_returning() -> list[Returning]:
    """Every returning record, oldest stop first; unreadable ones are dropped (a record
    only ever makes a launch wait, so losing one costs at most that wait)."""
    found = []
    for path in sorted(returning_dir().glob("*.json")):
        try:
            data = json.loads(path.read_text())
            found.append(Returning(path.stem, str(data["label"]), int(data["available_before"]),
                                   float(data["stopped_at"]),
                                   tuple(int(pid) for pid in data["pids"])))
        except (OSError, ValueError, TypeError, KeyError):
            path.unlink(missing_ok=True)
    return sorted(found, key=lambda r: r.stopped_at)


def clear_returning(container_name: str) -> None:
    (returning_dir() / f"{container_name}.json").unlink(missing_ok=True)


def write_action(action: str, engine: str, decision: Decision,
                 window: Sequence[Reading]) -> Path:
    """Record one watchdog action ("stopped", "warned", "would stop") with its window."""
    stamp = time.strftime("%Y%m%d-%H%M%S")
    path = actions_dir() / f"{stamp}-{time.monotonic_ns() % 10**6:06d}-{action.replace(' ', '-')}.json"
    paths.atomic_write_text(path, json.dumps({
        "action": action, "engine": engine, "at": _stamp(), "decision": decision.to_dict(),
        "window": [r.to_dict() for r in window]}, indent=1), mode=0o644)
    return path


def recent_actions(limit: int = 20) -> list[dict[str, Any]]:
    """The newest action records first (for `sparkdeck guard --history` and the TUI)."""
    found = sorted(actions_dir().glob("*.json"), reverse=True)[:limit]
    out = []
    for path in found:
        try:
            out.append({**json.loads(path.read_text()), "file": str(path)})
        except (OSError, ValueError):
            continue
    return out
