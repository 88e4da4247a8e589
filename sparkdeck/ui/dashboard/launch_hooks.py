"""What the launch area does with a launch event beyond the engine card: the hand-over of a
ready engine to the running watchdog, the switch wait screen, the guard line, the timeline.

Apart from the launch area (sparkdeck.ui.dashboard.launch), which imports this with a
launch's first event: the events' module is not loaded for the dashboard's first frame.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from sparkdeck.launch.events import (
    ContainerStarted,
    EngineReady,
    GuardDecided,
    SwitchWaited,
    TimelineSaved,
)
from sparkdeck.launch.listener import LaunchListener
from sparkdeck.ui.messages import GuardDecisionMade

if TYPE_CHECKING:
    from sparkdeck.ui.dashboard.launch import LaunchArea


class LaunchHooks(LaunchListener):
    """What the launch area does with an event beyond the card (in the launch thread)."""

    def __init__(self, area: LaunchArea) -> None:
        self.area = area

    def container_started(self, event: ContainerStarted) -> None:
        self.area.launch_guards = event.engine.container_id  # its start-up watchdog guards it

    def engine_ready(self, event: EngineReady) -> None:
        try:  # in the launch thread, so the hand-over is done before the launch ends
            self.area.app.call_from_thread(self.area._hand_over, event.engine)
        except RuntimeError:  # the app is shutting down
            pass

    def switch_waited(self, event: SwitchWaited) -> None:
        self.area.post_message(self.area.SwitchProgressed(event.progress, event.engine))

    def guard_decided(self, event: GuardDecided) -> None:
        self.area.post_message(GuardDecisionMade(event.decision))  # up to the watchdog line

    def timeline_saved(self, event: TimelineSaved) -> None:
        self.area.post_message(self.area.TimelineRecorded(event.timeline))


class ServiceLaunchHooks(LaunchHooks):
    """The same, for a launch the service runs: its start-up watchdog and then its guard
    follower guard the engine, so this window covers nothing and takes nothing over."""

    def container_started(self, event: ContainerStarted) -> None:
        pass

    def engine_ready(self, event: EngineReady) -> None:
        pass
