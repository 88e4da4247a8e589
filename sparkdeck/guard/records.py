"""What the guard writes to the data dir: launch records and watchdog actions.

A launch record keeps what the launch saw (the fit check, the start-up timeline). It is keyed
by the container's id, with the name inside: a name is reused by the next launch of the same
preset, and a launch killed right after its create must not leave the previous container's
record to be read as the new one's. A returning record is left by a stop that did not wait
for memory (`sparkdeck stop`, the TUI's stop): it keeps what the engine itself held just
before the stop (and where that figure came from), its host PIDs, and MemAvailable and the
host's AnonPages + Shmem at that moment, so the next launch can tell how much of it has come
back (sparkdeck.guard.switch). An action record keeps the decision and the last 60 s of
readings, so a stop can be understood afterwards. All writes are atomic; an action record
the disk cannot take is held in memory until it can (see `write_action`).
"""

from __future__ import annotations

import json
import re
import threading
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from sparkdeck.config import paths
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


def _safe(container_id: str) -> str:
    if not container_id or "/" in container_id or container_id.startswith("."):
        raise ValueError(f"not a container id: {container_id!r}")
    return container_id


def save_launch_record(container_id: str, container_name: str, record: dict[str, Any]) -> Path:
    """Write (or replace) the record of the launch that created container `container_id`."""
    path = launches_dir() / f"{_safe(container_id)}.json"
    paths.atomic_write_text(
        path,
        json.dumps(
            {
                **record,
                "container_id": container_id,
                "container_name": container_name,
                "saved_at": _stamp(),
            },
            indent=1,
        ),
    )
    return path


def load_launch_record(container_id: str) -> dict[str, Any] | None:
    """The record of that container, or None when there is none or it cannot be read."""
    try:
        data = json.loads((launches_dir() / f"{_safe(container_id)}.json").read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def launch_record_ids() -> list[str]:
    """The container ids that have a launch record (older name-keyed files included)."""
    return sorted(p.stem for p in launches_dir().glob("*.json"))


def drop_launch_record(container_id: str) -> None:
    (launches_dir() / f"{_safe(container_id)}.json").unlink(missing_ok=True)


@dataclass(frozen=True)
class Returning:
    """Memory an engine held when it was stopped and may not have given back yet."""

    container_id: str
    container_name: str
    label: str  # what to call it on screen: its preset id
    held: int  # what the engine itself held just before the stop (bytes)
    cpu_held: int  # the part of `held` in the host's AnonPages + Shmem (not NVML's)
    source: str  # where `held` came from ("container cgroup", ...)
    pids: tuple[int, ...]  # the engine's host PIDs: the wait goes on while any exists
    stopped_at: float  # wall clock (time.time()): the record outlives the process
    available_at_stop: int  # MemAvailable just before the stop
    anon_shmem_at_stop: int  # the host's AnonPages + Shmem just before the stop


def save_returning(returning: Returning) -> Path:
    path = returning_dir() / f"{_safe(returning.container_id)}.json"
    paths.atomic_write_text(path, json.dumps({**asdict(returning), "pids": sorted(returning.pids)}))
    return path


def load_returning() -> list[Returning]:
    """Every returning record, oldest stop first; unreadable ones are dropped (a record
    only ever makes a launch wait, so losing one costs at most that wait)."""
    found = []
    for path in sorted(returning_dir().glob("*.json")):
        try:
            data = json.loads(path.read_text())
            found.append(
                Returning(
                    str(data["container_id"]),
                    str(data["container_name"]),
                    str(data["label"]),
                    int(data["held"]),
                    int(data["cpu_held"]),
                    str(data["source"]),
                    tuple(int(pid) for pid in data["pids"]),
                    float(data["stopped_at"]),
                    int(data["available_at_stop"]),
                    int(data["anon_shmem_at_stop"]),
                )
            )
        except (OSError, ValueError, TypeError, KeyError):
            path.unlink(missing_ok=True)
    return sorted(found, key=lambda r: r.stopped_at)


def clear_returning(container_id: str) -> None:
    (returning_dir() / f"{_safe(container_id)}.json").unlink(missing_ok=True)


@dataclass(frozen=True)
class Settled:
    """What `settle_launch_records` did: records dropped, orphans adopted."""

    dropped: tuple[str, ...]  # container ids whose container is gone
    adopted: tuple[str, ...]  # container ids of live orphans now recorded as adopted


def settle_launch_records(engines: Sequence[Any], launch_in_progress: bool) -> Settled:
    """Make the launch records match the containers: one record per container id.

    `engines` are the scope's containers (EngineState: container_id, name, preset_id,
    alive). A record whose container is gone is dropped (a later container of the same name
    must not inherit it). A live container with no record of its own, while no launch is in
    progress, is an orphan: its launch was killed between the create and the record (kill -9).
    It is adopted: a record saying so is written, and sparkdeck follows it like any engine it
    launched (the guard and the TUI follow every live container of the scope; the next launch
    stops it and waits for its memory). During a launch nothing is adopted: the container
    may be that launch's own, about to get its record.
    """
    present = {e.container_id for e in engines}
    dropped = [cid for cid in launch_record_ids() if cid not in present]
    for cid in dropped:
        (launches_dir() / f"{cid}.json").unlink(missing_ok=True)
    adopted = []
    if not launch_in_progress:
        for engine in engines:
            if engine.alive and load_launch_record(engine.container_id) is None:
                save_launch_record(
                    engine.container_id,
                    engine.name,
                    {
                        "preset_id": engine.preset_id,
                        "adopted": True,
                        "adopted_reason": "found running with no launch in progress and no "
                        "record of its own (its launch was killed?)",
                    },
                )
                adopted.append(engine.container_id)
    return Settled(tuple(dropped), tuple(adopted))


# Action records the data dir could not take (a full disk): kept in this process, in order,
# until a later write, `write_held()` or a `service status` finds room for them. The guard's
# decision is what a person asks about after a stop, so losing it to ENOSPC is not an option;
# process-wide because the watchdog that decided may be gone (it ends with its engine) by the
# time space comes back. Bounded: a disk that stays full for days keeps the newest.
MAX_HELD = 200
_held: list[tuple[Path, dict[str, Any], str]] = []  # (path, record, why it is not written)
_held_lock = threading.Lock()
STOP_ACTIONS = ("stopping", "stop failed", "killed directly", "stopped")
_NAME = re.compile(r"^\d{8}-\d{6}-\d{9}-(?P<action>.+?)(?:-(?P<cid>[0-9a-f]{12}))?\.json$")


class RecordHeld(OSError):
    """An action record was not written: it is held in memory and written later, to
    `path` (where a later look, `guard --history`, finds it once there is room)."""

    def __init__(self, message: str, path: Path) -> None:
        super().__init__(message)
        self.path = path


def write_action(
    action: str,
    engine: str,
    decision: Decision,
    window: Sequence[Reading],
    note: str | None = None,
    container_id: str | None = None,
) -> Path:
    """Record one watchdog action ("stopping", "stop failed", "killed directly", "stopped",
    "warned", "would stop") with its window; `note` says what the stop attempt found. The
    container's short id ends the file name, so a later watchdog of the same container can
    find a stop that was not carried through (`pending_stop`) without reading every file.

    Raises RecordHeld when the data dir cannot take it: the record is then kept in memory
    (`held_actions`) and written, in order, by the next write or `write_held()`."""
    now = time.time_ns()  # the file names sort in the order the actions were taken
    stamp = time.strftime("%Y%m%d-%H%M%S", time.localtime(now / 1e9))
    short = f"-{container_id[:12]}" if container_id else ""
    path = actions_dir() / f"{stamp}-{now % 10**9:09d}-{action.replace(' ', '-')}{short}.json"
    data: dict[str, Any] = {
        "action": action,
        "engine": engine,
        "at": _stamp(),
        "decision": decision.to_dict(),
    }
    if note is not None:
        data["note"] = note
    if container_id:
        data["container_id"] = container_id
    data["window"] = [r.to_dict() for r in window]
    with _held_lock:
        _held.append((path, data, ""))
        left = _write_held_locked()
    if left:
        why = _held[0][2]
        raise RecordHeld(
            f"the guard's record of {action!r} was not written ({why}); "
            f"kept in memory with {left - 1} other{'s' * (left != 2)} until the "
            "data dir has room",
            path,
        )
    return path


def _write_held_locked() -> int:
    """Write the held records oldest first, stopping at the first failure (order matters:
    "stopped" must not land before its "stopping"); the number still held."""
    while _held:
        path, data, _ = _held[0]
        try:
            paths.atomic_write_text(path, json.dumps(data, indent=1))
        except OSError as exc:
            _held[0] = (path, data, exc.strerror or str(exc))
            while len(_held) > MAX_HELD:  # warnings go first: a stop's records stay
                drop = next(
                    (i for i, (_, d, _) in enumerate(_held) if d["action"] not in STOP_ACTIONS), 0
                )
                del _held[drop]
            return len(_held)
        _held.pop(0)
    return 0


def write_held() -> int:
    """Try the held records again (space may be back); the number still held."""
    with _held_lock:
        return _write_held_locked() if _held else 0


def held_actions() -> list[dict[str, Any]]:
    """The records not written yet, oldest first, without their windows (for status)."""
    with _held_lock:
        return [
            {
                **{k: v for k, v in data.items() if k != "window"},
                "file": str(path),
                "not_written": why or "not written yet",
            }
            for path, data, why in _held
        ]


def pending_stop(container_id: str) -> dict[str, Any] | None:
    """The stop decision ("stopping" record) of `container_id` that no "stopped" record has
    followed, written or held; None when there is none. A watchdog host that ends (a launch's
    start-up guard at ready, a TUI's line, a CLI, a service that died) leaves such a stop to
    whichever watchdog guards the container next: that one must carry it through, whatever
    its own readings say by then."""
    if not container_id:
        return None
    short = container_id[:12]
    found: list[tuple[str, str, dict[str, Any] | Path]] = []  # (name, action, data or path)
    with _held_lock:
        for path, data, _ in _held:
            if data.get("container_id") == container_id:
                found.append((path.name, str(data["action"]), data))
    for path in actions_dir().glob(f"*-{short}.json"):
        match = _NAME.match(path.name)
        if match and match["cid"] == short:
            found.append((path.name, match["action"].replace("-", " "), path))
    stops = sorted((f for f in found if f[1] in STOP_ACTIONS), key=lambda f: f[0])
    if not stops or stops[-1][1] == "stopped":
        return None
    for name, action, where in reversed(stops):
        if action != "stopping":
            continue
        if isinstance(where, dict):
            return {**where, "file": name}
        try:
            return {**json.loads(where.read_text()), "file": str(where)}
        except (OSError, ValueError):
            break
    return {
        "action": "stopping",
        "container_id": container_id,
        "decision": {"reasons": ["an earlier stop of this container"]},
    }


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
