"""The engine card: the one engine's state (stopped / pulling / starting / ready / crashed /
stopping), a pull progress bar, its address and uptime.

The state comes from two sources: Docker's reading (polled) and, while a launch or stop runs,
the launch flow's own events, which say more (a pull is invisible to Docker's container list).
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import datetime

from textual.content import Content
from textual.reactive import reactive
from textual.widgets import Static

from sparkdeck.pull_progress import PullProgress, PullTracker
from sparkdeck.telemetry_view import Bar, Row
from sparkdeck.ui.panels import bar_content, rows_content
from sparkdeck.ui.readers import EngineReading

LOG_LINES_SHOWN = 3


@dataclass(frozen=True)
class EngineReport:
    """What the card shows: the latest Docker reading and the running launch step, if any."""

    reading: EngineReading | None = None  # None until Docker has answered once
    docker_error: str | None = None
    phase: str | None = None  # pulling, stopping, flushing, starting: set by the launch flow
    detail: str = ""  # what the phase is doing, e.g. the image being pulled
    pull_fraction: float | None = None
    guard_stop: str | None = None  # the running watchdog stopped the engine: why (until a launch)


_FRACTION = re.compile(r"(\.\d{1,6})\d*")


def started_epoch(started_at: str | None) -> float | None:
    """Docker's StartedAt (RFC 3339, nanoseconds) as epoch seconds; None if absent or zero."""
    if not started_at or started_at.startswith("0001-"):
        return None
    try:
        text = _FRACTION.sub(r"\1", started_at.replace("Z", "+00:00"), count=1)
        return datetime.fromisoformat(text).timestamp()
    except ValueError:
        return None


def uptime_text(seconds: float) -> str:
    seconds = max(0, int(seconds))
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    return f"{hours}h {minutes:02d}m" if hours else f"{minutes}m {secs:02d}s"


def report_after(report: EngineReport, event: object, tracker: PullTracker) -> EngineReport:
    """The card after one launch-flow event (sparkdeck.launcher's events)."""
    from sparkdeck.launcher import (  # loaded with the first launch, not with the UI
        CacheFlushed, ContainerStarted, EngineReady, FitChecked, FlushSkipped, ModelPullStarted,
        PreviousStopped, PreviousStopping, PullStarted, SwitchWaited,
    )

    if isinstance(event, PullStarted):
        tracker.reset()
        return replace(report, phase="pulling", detail=f"pulling {event.image}",
                       pull_fraction=None)
    if isinstance(event, ModelPullStarted):
        tracker.reset()
        return replace(report, phase="pulling", detail=f"pulling model {event.model}",
                       pull_fraction=None)
    if isinstance(event, PullProgress):
        tracker.update(event)
        return replace(report, phase="pulling", pull_fraction=tracker.fraction)
    if isinstance(event, FitChecked):
        forced = " (forced)" if event.forced else ""
        return replace(report, detail=f"fit: {event.fit.verdict}{forced}")
    if isinstance(event, SwitchWaited):
        return replace(report, phase="stopping", detail=event.progress.describe())
    if isinstance(event, PreviousStopping):
        return replace(report, phase="stopping", pull_fraction=None,
                       detail=f"stopping {event.engine.preset_id or event.engine.name}")
    if isinstance(event, PreviousStopped):
        return replace(report, detail=f"stopped {event.engine.preset_id or event.engine.name} "
                                      f"in {event.seconds:.1f} s")
    if isinstance(event, CacheFlushed):
        return replace(report, phase="starting", detail=event.report.describe())
    if isinstance(event, FlushSkipped):
        return replace(report, phase="starting", detail=f"page cache kept ({event.reason})")
    if isinstance(event, ContainerStarted):
        return replace(report, phase="starting", detail="waiting for the health endpoint",
                       reading=EngineReading(event.engine, False))
    if isinstance(event, EngineReady):
        return EngineReport(reading=EngineReading(event.engine, True))
    return report


def card_state(report: EngineReport) -> tuple[str, str]:
    """The state word and its level: the launch flow's phase wins over Docker's reading."""
    if report.phase is not None:
        return report.phase, "warning"
    reading = report.reading
    if reading is None or reading.engine is None:
        return "stopped", "muted"
    status = reading.status
    if status == "ready":
        return status, "success"
    if reading.engine.crashed:
        return status, "error"
    return status, "warning"


def engine_content(report: EngineReport, now: float) -> Content:
    """The card's text at wall-clock time `now` (epoch seconds)."""
    if report.docker_error is not None and report.phase is None:
        return Content.assemble(("Docker unreachable", "bold $error"),
                                ": no engine can be read (see environment)")
    if report.reading is None and report.phase is None:
        return Content.styled("checking…", "$text-muted")
    state, level = card_state(report)
    rows = [Row("state", state, level)]
    parts = [rows_content(rows)]
    if report.phase == "pulling":
        fraction = report.pull_fraction
        text = "waiting for sizes" if fraction is None else f"{fraction * 100:.0f} %"
        parts.append(bar_content(Bar("pull", fraction or 0.0, text)))
    if report.detail:
        parts.append(rows_content([Row("step", report.detail, "muted")]))
    if report.guard_stop:
        parts.append(rows_content([Row("guard", report.guard_stop, "error")]))
    engine = report.reading.engine if report.reading else None
    if engine is not None:
        info = [Row("preset", f"{engine.preset_id or '(unlabelled)'}  {engine.kind}"),
                Row("address", engine.base_url)]
        started = started_epoch(engine.started_at)
        if engine.alive and started is not None:
            info.append(Row("uptime", uptime_text(now - started)))
        if engine.model:
            info.append(Row("model", engine.model, "muted"))
        parts.append(rows_content(info))
        if engine.crashed and engine.log_tail:
            parts.append(rows_content([Row("last log", "")]))
            parts += [Content.styled(f"  {line}", "$text-muted")
                      for line in engine.log_tail[-LOG_LINES_SHOWN:]]
    return Content("\n").join(parts)


class EngineCard(Static):
    """Renders an EngineReport; ticks once a second only while an uptime is shown."""

    report: reactive[EngineReport] = reactive(EngineReport())

    def __init__(self, wall_clock: Callable[[], float] = time.time, **kwargs: str) -> None:
        super().__init__(**kwargs)
        self._wall_clock = wall_clock

    def on_mount(self) -> None:
        self.border_title = "engine"
        self._ticker = self.set_interval(1.0, self._tick, pause=True, name="uptime")

    def _tick(self) -> None:
        self.update(engine_content(self.report, self._wall_clock()))

    def watch_report(self, report: EngineReport) -> None:
        self._tick()
        engine = report.reading.engine if report.reading else None
        if engine is not None and engine.alive:
            self._ticker.resume()
        else:
            self._ticker.pause()
