"""What a launch reports as it goes: one frozen dataclass per step, facts in the past tense.

The launch sequence (sparkdeck.launch.sequence) posts these to its `on_event` sink, typed
`EventSink`. Each event says what it means itself: `describe()` is the sentence the CLI
prints and the engine card and guard line show, `phase` the engine card's state word while
the step runs. A front end that must do more than show the sentence (a progress bar, a
hand-over to the running watchdog) subclasses `LaunchListener` and overrides the hooks it
needs (sparkdeck.launch.listener); `event.deliver(listener)` calls the one hook for that
event, so no front end tests an event's type. Kept apart from the sequence so that front
ends can name them without loading the docker SDK.
"""

from __future__ import annotations

import threading
import typing
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

from sparkdeck.host.meminfo import gib
from sparkdeck.launch.listener import Step
from sparkdeck.launch.model_events import (
    ModelDownloaded,
    ModelDownloading,
    ModelDownloadStarted,
    ModelInCache,
    ModelPullStarted,
)
from sparkdeck.runtime.pull import PullProgress

if TYPE_CHECKING:  # field types only: the TUI names these events before its first frame
    from pathlib import Path

    from sparkdeck.guard.fit import FitCheck
    from sparkdeck.guard.policy import Decision
    from sparkdeck.guard.switch import SwitchProgress
    from sparkdeck.guard.timeline import StartupTimeline
    from sparkdeck.host.pagecache import FlushReport
    from sparkdeck.launch.listener import LaunchListener
    from sparkdeck.runtime.state import EngineState


def _name(engine: EngineState) -> str:
    return engine.preset_id or engine.name


@dataclass(frozen=True)
class PullStarted(Step):
    image: str
    phase: ClassVar[str | None] = "pulling"

    def describe(self) -> str:
        return f"image {self.image} is not here: pulling it"

    def deliver(self, listener: LaunchListener) -> None:
        listener.pull_started(self)


@dataclass(frozen=True)
class FitChecked(Step):
    fit: FitCheck
    forced: bool

    def describe(self) -> str:
        head = (
            "memory fit: "
            + self.fit.verdict
            + (" (launching anyway: --force)" if self.forced else "")
        )
        return "\n  ".join([head, *self.fit.lines()[:-1]])

    def deliver(self, listener: LaunchListener) -> None:
        listener.fit_checked(self)


@dataclass(frozen=True)
class RepliesAwaited(Step):
    """The endpoint streams `count` replies from the engine this launch stops: the stop
    waits for them, `limit_s` at most. Sent when the wait begins, and with `done` when it
    ends (`count` is then the replies still streaming, which the stop cuts off)."""

    count: int
    limit_s: float
    waited_s: float = 0.0
    done: bool = False
    phase: ClassVar[str | None] = "stopping"

    def describe(self) -> str:
        replies = f"{self.count} repl{'y' if self.count == 1 else 'ies'}"
        if not self.done:
            return (
                f"waiting for {replies} through the endpoint to finish before the stop "
                f"(at most {self.limit_s:g} s; [endpoint] finish_replies_s)"
            )
        if self.count == 0:
            return f"the endpoint's replies finished in {self.waited_s:.1f} s"
        return f"went on after {self.waited_s:.1f} s: the stop cuts {replies} off"

    def deliver(self, listener: LaunchListener) -> None:
        listener.replies_awaited(self)


@dataclass(frozen=True)
class PreviousStopping(Step):
    """SIGTERM goes to `engine` now (`at`, epoch seconds); SIGKILL after `grace` seconds."""

    engine: EngineState
    grace: float = 30.0
    at: float = 0.0
    phase: ClassVar[str | None] = "stopping"

    def describe(self) -> str:
        return f"stopping {_name(self.engine)} ({self.engine.name})"

    def deliver(self, listener: LaunchListener) -> None:
        listener.previous_stopping(self)


@dataclass(frozen=True)
class PreviousStopped(Step):
    engine: EngineState
    seconds: float

    def describe(self) -> str:
        return f"stopped {_name(self.engine)} in {self.seconds:.1f} s"

    def deliver(self, listener: LaunchListener) -> None:
        listener.previous_stopped(self)


@dataclass(frozen=True)
class SwitchWaited(Step):
    """One step of the wait for a stopped engine's memory (the last one has `done`)."""

    engine: str  # its preset id (or container name)
    progress: SwitchProgress
    phase: ClassVar[str | None] = "stopping"

    def describe(self) -> str:
        return "waiting for memory to come back: " + self.progress.describe()

    def deliver(self, listener: LaunchListener) -> None:
        listener.switch_waited(self)


@dataclass(frozen=True)
class CacheFlushed(Step):
    report: FlushReport
    phase: ClassVar[str | None] = "starting"

    def describe(self) -> str:
        return self.report.describe()

    def deliver(self, listener: LaunchListener) -> None:
        listener.cache_flushed(self)


@dataclass(frozen=True)
class FlushSkipped(Step):
    reason: str
    phase: ClassVar[str | None] = "starting"

    def describe(self) -> str:
        return f"page cache not flushed ({self.reason})"

    def deliver(self, listener: LaunchListener) -> None:
        listener.flush_skipped(self)


@dataclass(frozen=True)
class ContainerStarted(Step):
    engine: EngineState
    phase: ClassVar[str | None] = "starting"

    def describe(self) -> str:
        return (
            f"started {self.engine.name}; waiting for {self.engine.base_url}"
            f"{self.engine.health_path}"
        )

    def deliver(self, listener: LaunchListener) -> None:
        listener.container_started(self)


@dataclass(frozen=True)
class GuardDecided(Step):
    """The start-up watchdog's decision on one reading."""

    decision: Decision

    def describe(self) -> str:
        return "memory guard: " + self.decision.describe()

    def deliver(self, listener: LaunchListener) -> None:
        listener.guard_decided(self)


@dataclass(frozen=True)
class GuardFailed(Step):
    """The start-up watchdog could not read the host: the start-up is not guarded."""

    error: str

    def describe(self) -> str:
        return f"memory guard cannot read the host, the start-up is NOT guarded: {self.error}"

    def deliver(self, listener: LaunchListener) -> None:
        listener.guard_failed(self)


@dataclass(frozen=True)
class TimelineSaved(Step):
    timeline: StartupTimeline
    path: Path

    def describe(self) -> str:
        t = self.timeline
        phases = ", ".join(f"{m.phase} {m.t:.1f} s" for m in t.marks) or "none seen"
        return (
            f"start-up timeline: {len(t.points)} samples, peak used "
            f"{gib(t.peak_used)}, phases: {phases} ({self.path})"
        )

    def deliver(self, listener: LaunchListener) -> None:
        listener.timeline_saved(self)


@dataclass(frozen=True)
class EngineReady(Step):
    engine: EngineState
    seconds: float

    def describe(self) -> str:
        lan = f"\nWARNING: {self.engine.lan_warning()}" if self.engine.on_lan else ""
        return (
            f"ready in {self.seconds:.1f} s: {self.engine.preset_id} at "
            f"{self.engine.base_url} (OpenAI API at {self.engine.base_url}/v1)" + lan
        )

    def deliver(self, listener: LaunchListener) -> None:
        listener.engine_ready(self)


@dataclass(frozen=True)
class CleanupStopping(Step):
    """The launch failed or was interrupted after its container started: it is being stopped
    with `grace` seconds for SIGTERM (a second Ctrl-C kills it at once)."""

    engine: EngineState
    grace: float

    def describe(self) -> str:
        return (
            f"stopping {self.engine.name} (up to {self.grace:g} s for it to exit; press "
            "Ctrl-C again to kill it now)"
        )

    def deliver(self, listener: LaunchListener) -> None:
        listener.cleanup_stopping(self)


@dataclass(frozen=True)
class CleanupHurried(Step):
    """A second interrupt came during that graceful stop: the container is killed now."""

    engine: EngineState

    def describe(self) -> str:
        return f"second Ctrl-C: killing {self.engine.name} now"

    def deliver(self, listener: LaunchListener) -> None:
        listener.cleanup_hurried(self)


LaunchEvent = (
    PullStarted
    | ModelPullStarted
    | PullProgress
    | FitChecked
    | ModelInCache
    | ModelDownloadStarted
    | ModelDownloading
    | ModelDownloaded
    | RepliesAwaited
    | PreviousStopping
    | PreviousStopped
    | SwitchWaited
    | CacheFlushed
    | FlushSkipped
    | ContainerStarted
    | GuardDecided
    | GuardFailed
    | TimelineSaved
    | EngineReady
    | CleanupStopping
    | CleanupHurried
)

EventSink = Callable[[LaunchEvent], object]  # what it returns is not used
"""Where a launch sends its events (called from the launch's thread)."""

BeforeStop = Callable[[EventSink, threading.Event | None, threading.Event | None], object]
"""What a launch runs before it stops anything (the service's wait for the replies its
endpoint streams): given the launch's event sink, its cancel and its skip-the-wait events."""


def event_to_dict(event: LaunchEvent) -> dict[str, Any]:
    """`event` as the service sends it to its clients (sparkdeck.launch.wire)."""
    from sparkdeck.launch.wire import event_to_dict as encode

    return encode(event)


def event_from_dict(data: dict[str, Any]) -> LaunchEvent:
    """The event a `launch-event` from the service carries; WireError when it is none this
    sparkdeck knows (a service of another version)."""
    from sparkdeck.launch.wire import event_from_dict as decode

    kinds = {cls.__name__: cls for cls in typing.get_args(LaunchEvent)}
    return decode(data, kinds)
