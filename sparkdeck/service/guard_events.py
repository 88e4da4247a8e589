"""What a front end learns from the engine's guard, as typed events (EngineControl.guard).

The guard of an engine is the service's watchdog while the service runs and answers, this
process's own while it does not (taken over) or while the service is switched off. A front
end (the TUI's guard line, `sparkdeck guard`) asks its EngineControl to follow the guard and
renders these events with one `match`: it never asks itself whether a service runs. Events
that say who guards now (ServiceGuards, TakenOver, GuardedHere) come before the decisions
of that guard.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from sparkdeck.guard.policy import Decision
    from sparkdeck.guard.stopper import StopAttempt
    from sparkdeck.guard.watchdog import Watchdog
    from sparkdeck.service.liveness import Liveness


@dataclass(frozen=True)
class Decided:
    """This process's watchdog decided (the service is off, or silent: see TakenOver)."""

    decision: Decision


@dataclass(frozen=True)
class ServiceDecided:
    """The service's watchdog decided (it guards the engine, this process shows it)."""

    level: str  # ok, warn, stop
    text: str
    reasons: tuple[str, ...]


@dataclass(frozen=True)
class StopTried:
    """A watchdog (the service's or this process's) tried to stop the engine."""

    attempt: StopAttempt


@dataclass(frozen=True)
class ReadFailed:
    """This process's watchdog could not read the host; it tries again."""

    error: Exception


@dataclass(frozen=True)
class GuardStopped:
    """The service's watchdog stopped the engine, for `reasons` (this process's own stop
    is its stop decision and the StopTried that says done); `record`: the readings' file."""

    reasons: str
    record: str = ""


@dataclass(frozen=True)
class ServiceGuards:
    """Who guards now: the service (process `pid`), with or without this front end;
    `text` says so (and whether this front end started it)."""

    pid: int | None
    text: str


@dataclass(frozen=True)
class TakenOver:
    """Who guards now: this front end, because the service does not answer or is gone and
    cannot be started (`liveness` says which); it hands back when the service answers."""

    liveness: Liveness


@dataclass(frozen=True)
class GuardedHere:
    """Who guards now: this process, for good (the service is switched off)."""


@dataclass(frozen=True)
class GuardNote:
    """Something about the service a front end should say (it did not start, ...)."""

    text: str


GuardEvent = (
    Decided
    | ServiceDecided
    | StopTried
    | ReadFailed
    | GuardStopped
    | ServiceGuards
    | TakenOver
    | GuardedHere
    | GuardNote
)
# (what it returns is not used: `object` lets a front end pass post_message-like calls)
GuardSink = Callable[[GuardEvent], object]

# The kinds of the service's events a front end's guard relays (service.relay).
GUARD_KINDS = ("guard", "stop-attempt", "engine")


class GuardStream(Protocol):
    """A front end's stream of the service's events that its guard relay rides on (a
    window's service feed), instead of a stream and a thread of the relay's own."""

    live: bool  # the stream is open now

    def relay_guard(
        self, handle: Callable[[str, dict[str, Any]], None], done: threading.Event, silence_s: float
    ) -> bool | None:
        """Call `handle(kind, data)` with each of the guard's events, in the stream's own
        thread, until `done` (True) or the stream ends or is silent for `silence_s` (False);
        None when the stream is not live."""
        ...


class EngineGuard(Protocol):
    """One engine's guard as a front end follows it: `run()` hands events to the sink until
    `done` is set or this process's own watchdog has stopped the engine."""

    # this process's own watchdog: it decides only while the service is off or silent
    watchdog: Watchdog

    def run(self) -> None: ...


class LocalGuard:
    """The service is switched off: this process's watchdog guards, from start to end."""

    def __init__(
        self,
        watchdog: Watchdog,
        done: threading.Event,
        hz: Callable[[], float],
        on_event: GuardSink,
    ) -> None:
        self.watchdog, self.done, self.hz, self.on_event = watchdog, done, hz, on_event

    def run(self) -> None:
        self.on_event(GuardedHere())
        self.watchdog.run(self.done, self.hz)
