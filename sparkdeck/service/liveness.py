"""Is the service there, and does it answer? What every front end asks before it trusts the
service to guard the engine.

Three answers are not the same and each calls for its own action:

- **answering**: the heartbeat came back within HEARTBEAT_S; the service guards the engine.
- **not running**: no socket, or a socket nobody accepts on (a killed service leaves its
  file behind; connect() is refused at once). A front end may start a new one.
- **not answering**: the socket accepts (the kernel queues the connection) but no answer
  comes within HEARTBEAT_S: a stopped (SIGSTOP) or wedged process that still holds the
  service lock, so a new service cannot start either. The engine is not guarded by it: a
  front end that is open guards the engine itself until the service answers again.

The heartbeat is its own route, answered on the event loop without touching Docker or /proc,
so a slow Docker does not read as a dead service.
"""

from __future__ import annotations

import socket
import time
from dataclasses import asdict, dataclass
from typing import Any

from sparkdeck.service import location

HEARTBEAT_S = 2.0  # the promise: a front end knows within this long that nobody answers
ANSWERING, NOT_RUNNING, NOT_ANSWERING, OFF = ("answering", "not running", "not answering", "off")


@dataclass(frozen=True)
class Liveness:
    state: str  # ANSWERING, NOT_RUNNING, NOT_ANSWERING, OFF
    pid: int | None = None  # the service's (answering) or the lock holder's (not answering)
    detail: str = ""  # why, in words: "process 123 is stopped (SIGSTOP)"
    guarding: str | None = None  # the engine the service's watchdog follows
    decided_s_ago: float | None = None  # since its watchdog's latest decision

    @property
    def answering(self) -> bool:
        return self.state == ANSWERING

    @property
    def usable(self) -> bool:
        """It answers, and without an error (a service of another API version answers
        every request with one: it guards, but this front end cannot follow it)."""
        return self.state == ANSWERING and not self.detail

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def unguarded_line(self, engine: str) -> str:
        """What to tell the user when `engine` runs and this service does not guard it."""
        if self.state == NOT_ANSWERING:
            return (
                f"UNGUARDED: the sparkdeck service is not answering ({self.detail}): "
                f"nothing guards {engine}'s memory. An open sparkdeck window or "
                "`sparkdeck guard` guards it meanwhile; `sparkdeck service stop` ends a "
                "hung service"
            )
        if self.state == OFF:
            return (
                f"{engine} is guarded only while a sparkdeck window or `sparkdeck "
                "guard` runs (the service is switched off: SPARKDECK_SERVICE=off)"
            )
        return (
            f"UNGUARDED: the sparkdeck service is not running ({self.detail}): nothing "
            f"guards {engine}'s memory (`sparkdeck service start`)"
        )


STOPPED = ("stopped (SIGSTOP)", "stopped by a debugger")


def process_state(pid: int) -> str | None:
    """How the kernel sees `pid`: "stopped (SIGSTOP)", "a zombie", ... or None when gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as stat:
            state = stat.read().rsplit(b")", 1)[1].split()[0].decode()
    except (OSError, IndexError):
        return None
    return {
        "T": "stopped (SIGSTOP)",
        "t": "stopped by a debugger",
        "Z": "a zombie",
        "D": "waiting on the disk or a device",
    }.get(state, "running")


def lock_holder() -> int | None:
    """The process that holds the service lock, if one does. Never by taking the lock: a
    probe every second while a service starts would make that start fail."""
    from sparkdeck.config.file_lock import FileLock

    return FileLock("service").held_by()


def probe(timeout: float = HEARTBEAT_S) -> Liveness:
    """Ask the service's heartbeat once; at most `timeout` seconds."""
    from sparkdeck.service import ServiceError
    from sparkdeck.service.client import ServiceClient

    if not location.enabled():
        return Liveness(OFF, detail="SPARKDECK_SERVICE=off")
    try:
        path = location.socket_path()
    except ValueError as exc:
        return Liveness(NOT_RUNNING, detail=str(exc))
    if not path.exists():
        return _absent("no socket at " + str(path))
    holder = lock_holder()
    if holder is not None and process_state(holder) in STOPPED:
        # the kernel says it cannot answer: no need to wait out the timeout to know
        return Liveness(
            NOT_ANSWERING,
            holder,
            f"process {holder} is {process_state(holder)}: it cannot answer until it is continued",
        )
    started = time.monotonic()
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
            sock.settimeout(timeout)
            sock.connect(str(path))
    except (ConnectionRefusedError, FileNotFoundError):
        return _absent("its socket is left over: the process that made it is gone")
    except OSError as exc:
        return _absent(f"its socket does not take connections ({exc})")
    # what is left of the promise, less a margin for making the client and the answer's
    # parsing on a loaded machine: the whole probe stays within `timeout`
    left = max(0.1, timeout - (time.monotonic() - started) - 0.15)
    try:
        with ServiceClient(path, timeout=left) as client:
            beat = client.heartbeat()
    except ServiceError as exc:
        if exc.status is not None:  # it answered, with an error: alive (another version?)
            return Liveness(ANSWERING, lock_holder(), str(exc).splitlines()[0][:200])
        return _silent(timeout)
    return Liveness(
        ANSWERING, int(beat["pid"]), "", beat.get("guarding"), beat.get("decided_s_ago")
    )


def _absent(why: str) -> Liveness:
    holder = lock_holder()
    if holder is not None:  # the lock is held, but no socket: a service that lost its file
        return Liveness(
            NOT_ANSWERING,
            holder,
            f"process {holder} holds the service lock "
            f"but {why}; `sparkdeck service stop`, then start it again",
        )
    return Liveness(NOT_RUNNING, None, why)


def _silent(timeout: float) -> Liveness:
    holder = lock_holder()
    state = process_state(holder) if holder is not None else None
    who = f"process {holder}" if holder is not None else "the process on its socket"
    return Liveness(
        NOT_ANSWERING,
        holder,
        f"{who} is {state or 'running'} but gave no answer within {timeout:g} s",
    )


OOM_SCORE_ADJ = -500  # the kernel's OOM killer takes the engine (or anything else) first


def protect_from_oom(path: str = "/proc/self/oom_score_adj") -> str:
    """Make the service the OOM killer's late choice: it is what stops the engine before
    the host runs out. Lowering the score needs CAP_SYS_RESOURCE (root, or systemd's
    OOMScoreAdjust=); without it the score stays and the line says so."""
    try:
        with open(path, "w") as adj:
            adj.write(str(OOM_SCORE_ADJ))
    except OSError as exc:
        return (
            f"oom_score_adj left as it was ({exc.strerror or exc}): lowering it needs "
            "root or CAP_SYS_RESOURCE; the systemd unit sets OOMScoreAdjust"
        )
    return f"oom_score_adj {OOM_SCORE_ADJ}: the OOM killer picks other processes first"


def heartbeat_body(pid: int, follower: Any, hub: Any) -> dict[str, Any]:
    """The service's side: who it is and what its watchdog does, from memory only."""
    last = hub.latest.get("guard")
    engine = follower.engine
    return {
        "pid": pid,
        "guarding": engine.name if engine is not None and follower.dog is not None else None,
        "decided_s_ago": round(time.time() - last.at, 3) if last is not None else None,
    }


def guard_report(engine: str | None) -> dict[str, Any]:
    """`sparkdeck status`'s guard part: who guards `engine` (a running engine of
    sparkdeck's, or None). A service found gone while an engine runs is started again here,
    so the engine is guarded from now on; `unguarded` is true when nothing is known to guard
    it (an open window may still be guarding it: it says so on its own screen)."""
    life = probe()
    report: dict[str, Any] = {
        "service": life.to_dict(),
        "restarted": None,
        "unguarded": False,
        "line": None,
    }
    if engine is None:
        return report
    if life.state == NOT_RUNNING:
        from sparkdeck.service import ServiceError
        from sparkdeck.service.client import ensure_running

        try:
            client, started = ensure_running()
            with client:
                pid = int(client.heartbeat()["pid"])
        except ServiceError as exc:
            report["line"] = life.unguarded_line(engine) + f"; it did not start: {exc}"
            report["unguarded"] = True
            return report
        report["restarted"] = pid if started else None
        report["service"] = Liveness(ANSWERING, pid, guarding=engine).to_dict()
        report["line"] = (
            f"the sparkdeck service was not running ({life.detail}); started "
            f"it again (process {pid}): it guards {engine} from now on"
            if started
            else f"the sparkdeck service (process {pid}) guards {engine}"
        )
        return report
    if life.answering:
        report["line"] = f"the sparkdeck service (process {life.pid}) guards {engine}"
        return report
    report["unguarded"] = life.state != OFF
    report["line"] = life.unguarded_line(engine)
    return report
