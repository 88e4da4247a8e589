"""What the launch area (sparkdeck.ui.dashboard.launch) posts: to itself from its workers,
and to the app. `LaunchArea.Planned` and the rest name these; the "launch_area" namespace
keeps their handlers' names what they were as LaunchArea's nested classes
(`on_launch_area_planned`, ...)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from textual.message import Message

from sparkdeck.runtime.pull import PullProgress

# the launch machinery loads with the first plan (launch.py says why): types only here
if TYPE_CHECKING:
    from sparkdeck.guard.switch import SwitchProgress
    from sparkdeck.guard.timeline import StartupTimeline
    from sparkdeck.launch.events import LaunchEvent
    from sparkdeck.launch.plan import LaunchPlan, StopPlan


@dataclass
class Planned(Message, bubble=False, namespace="launch_area"):
    """A launch (or stop) was planned; the user is asked to confirm it."""

    plan: LaunchPlan | StopPlan


@dataclass
class Progressed(Message, bubble=False, namespace="launch_area"):
    """The launch or stop reported a step (a sparkdeck.launch.events event)."""

    event: LaunchEvent

    def can_replace(self, message: Message) -> bool:
        # Textual drops this (older) message when the one queued behind it may stand for it.
        # A pull sends many progress events; one that only moves a layer's bytes on stands
        # for the one before it of the same layer and step. One that changes the step, or
        # is of another layer, never does: dropping a layer's "Download complete" made the
        # tracker take the "Extracting" bytes after it (counted from 0 again) for its
        # download, and the bar went back to 1 % under load (a parallel run, 2026-12-05).
        return (
            isinstance(self.event, PullProgress)
            and isinstance(message, Progressed)
            and isinstance(message.event, PullProgress)
            and message.event.layer == self.event.layer
            and message.event.status == self.event.status
        )


@dataclass
class ServiceStepped(Message, bubble=False, namespace="launch_area"):
    """A launch the service runs began (the card says who runs it)."""

    phase: str | None = None
    text: str = ""


@dataclass
class Finished(Message, bubble=False, namespace="launch_area"):
    """The launch or stop ended, done or failed (a failure is the worker's error)."""

    action: str


@dataclass
class SwitchProgressed(Message, bubble=False, namespace="launch_area"):
    """The wait for a stopped engine's memory moved on (the last one is `done`)."""

    progress: SwitchProgress
    engine_name: str = "the stopped engine"

    def can_replace(self, message: Message) -> bool:
        return isinstance(message, SwitchProgressed) and not message.progress.done


@dataclass
class TimelineRecorded(Message, namespace="launch_area"):
    """A start-up timeline grew (while starting) or was saved (at ready); for the app's
    guard tab."""

    timeline: StartupTimeline

    def can_replace(self, message: Message) -> bool:
        return isinstance(message, TimelineRecorded)


@dataclass
class RunChanged(Message, namespace="launch_area"):
    """A launch or stop began (`running`) or ended; the app samples faster meanwhile."""

    running: bool
