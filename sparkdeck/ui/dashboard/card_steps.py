"""What each launch event changes on the engine card (sparkdeck.launch.events).

Apart from the card (sparkdeck.ui.dashboard.engine_card) because the events are needed only
once a launch runs: the launch area imports this with its first event, and the dashboard's
first frame does not wait for the launch machinery (benchmarks/tui_idle.py).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from sparkdeck.launch.events import (
    CacheFlushed,
    ContainerStarted,
    EngineReady,
    FitChecked,
    FlushSkipped,
    LaunchEvent,
    ModelDownloading,
    ModelDownloadStarted,
    ModelPullStarted,
    PreviousStopped,
    PreviousStopping,
    PullStarted,
    SwitchWaited,
)
from sparkdeck.launch.listener import LaunchListener
from sparkdeck.launch.stop_countdown import end_text
from sparkdeck.runtime.pull import PullProgress, PullTracker
from sparkdeck.ui.dashboard.engine_card import EngineReport
from sparkdeck.ui.readers import EngineReading


class CardSteps(LaunchListener):
    """One launch event's step on the card: each hook is what that event changes."""

    def __init__(self, report: EngineReport, tracker: PullTracker) -> None:
        self.report = report
        self.tracker = tracker

    def _set(self, **changes: Any) -> None:
        self.report = replace(self.report, **changes)

    def pull_started(self, event: PullStarted) -> None:
        self.tracker.reset()
        self._set(phase="pulling", detail=f"pulling {event.image}", pull_fraction=None)

    def model_pull_started(self, event: ModelPullStarted) -> None:
        self.tracker.reset()
        self._set(phase="pulling", detail=f"pulling model {event.model}", pull_fraction=None)

    def model_download_started(self, event: ModelDownloadStarted) -> None:
        self._set(phase=event.phase, detail=f"downloading model {event.repo}", pull_fraction=0.0)

    def model_downloading(self, event: ModelDownloading) -> None:
        self._set(phase=event.phase, detail=event.describe(), pull_fraction=event.fraction)

    def pull_progress(self, event: PullProgress) -> None:
        self.tracker.update(event)
        self._set(phase="pulling", pull_fraction=self.tracker.fraction)

    def fit_checked(self, event: FitChecked) -> None:
        self._set(detail=f"fit: {event.fit.verdict}{' (forced)' if event.forced else ''}")

    def switch_waited(self, event: SwitchWaited) -> None:
        self._set(phase=event.phase, detail=event.progress.describe())

    def previous_stopping(self, event: PreviousStopping) -> None:
        self._set(
            phase=event.phase,
            pull_fraction=None,
            previous=event.engine,
            reading=None,
            detail=f"stopping {event.engine.preset_id or event.engine.name}",
            stop_deadline=event.at + event.grace if event.engine.alive else None,
            stop_grace=event.grace,
        )

    def previous_stopped(self, event: PreviousStopped) -> None:
        # The old engine is gone: none of its numbers stay on the card, and how it ended
        # (by itself, or SIGKILL at the end of the grace) is the step.
        name = event.engine.preset_id or event.engine.name
        self._set(
            previous=None,
            reading=None,
            stop_deadline=None,
            detail=end_text(name, self.report.stop_grace, event.seconds)
            if self.report.stop_deadline is not None
            else event.describe(),
        )

    def cache_flushed(self, event: CacheFlushed) -> None:
        self._set(phase=event.phase, detail=event.describe())

    def flush_skipped(self, event: FlushSkipped) -> None:
        self._set(phase=event.phase, detail=f"page cache kept ({event.reason})")

    def container_started(self, event: ContainerStarted) -> None:
        self._set(
            phase=event.phase,
            detail="waiting for the health endpoint",
            reading=EngineReading(event.engine, False),
        )

    def engine_ready(self, event: EngineReady) -> None:
        self.report = EngineReport(reading=EngineReading(event.engine, True))


def report_after(report: EngineReport, event: LaunchEvent, tracker: PullTracker) -> EngineReport:
    """The card after one launch event (sparkdeck.launch.events); other events leave it."""
    update = CardSteps(report, tracker)
    event.deliver(update)
    return update.report
