"""Messages the memory guard's workers post to the app (facts, in the past tense)."""

from __future__ import annotations

from textual.message import Message

from sparkdeck.guard.fit import FitCheck
from sparkdeck.guard.policy import Decision
from sparkdeck.guard.switch import SwitchProgress
from sparkdeck.guard.timeline import StartupTimeline


class GuardDecisionMade(Message):
    """The watchdog decided on its newest reading (ok, warn or stop)."""

    def __init__(self, decision: Decision) -> None:
        super().__init__()
        self.decision = decision

    def can_replace(self, message: Message) -> bool:
        # The latest reading wins, except that a stop must never be replaced unseen.
        return isinstance(message, GuardDecisionMade) and message.decision.level != "stop"


class SwitchProgressed(Message):
    """The wait for a stopped engine's memory moved on (the last one is `done`);
    `engine_name` is the engine whose memory is awaited."""

    def __init__(self, progress: SwitchProgress, engine_name: str = "the stopped engine"
                 ) -> None:
        super().__init__()
        self.progress = progress
        self.engine_name = engine_name

    def can_replace(self, message: Message) -> bool:
        return isinstance(message, SwitchProgressed) and not message.progress.done


class LaunchFitChecked(Message):
    """The fit check for a launch the user asked for came back."""

    def __init__(self, preset_id: str, fit: FitCheck) -> None:
        super().__init__()
        self.preset_id = preset_id
        self.fit = fit


class TimelineRecorded(Message):
    """A start-up timeline grew (while starting) or was saved (at ready)."""

    def __init__(self, timeline: StartupTimeline) -> None:
        super().__init__()
        self.timeline = timeline

    def can_replace(self, message: Message) -> bool:
        return isinstance(message, TimelineRecorded)
