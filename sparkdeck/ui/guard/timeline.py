"""The guard tab's start-up timeline chart: used memory from launch to ready, with phases.

Two sources feed it. A launch this window runs hands its timeline over at once (the app
binds it into `timeline`). A launch the sparkdeck service runs (asked for by this window, by
another one or by the CLI) reaches a window only as lines of text, but the service saves its
timeline in the launch's record, as every launch does: the chart reads the newest record
(sparkdeck.guard.timeline.latest_recorded) when it is mounted, and while it is on screen
whenever the launches folder changed (a stat every LOOK_S; the read in a thread worker).
The newer of the two is drawn, titled with its preset when it came from a record.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from typing import Any

from textual import work
from textual.app import RenderResult
from textual.content import Content
from textual.message import Message
from textual.reactive import reactive
from textual.widget import Widget
from textual.worker import Worker

from sparkdeck.guard.timeline import RecordedStartup, StartupTimeline, latest_recorded
from sparkdeck.ui.messages import report_worker_failure

LOOK_S = 2.0  # how often the shown chart looks for a newer launch record

BLOCKS = " ▁▂▃▄▅▆▇█"


def chart_rows(timeline: StartupTimeline, width: int, height: int) -> list[str]:
    """Used memory over time as block columns, scaled to MemTotal; `height` rows of text.

    Each column is the highest reading in its slice of time, so a short peak is never
    averaged away (the peak is what wedges a Spark).
    """
    if not timeline.points or width < 1 or height < 1 or timeline.total <= 0:
        return [" " * max(width, 0)] * max(height, 0)
    span = max(timeline.points[-1].t, 1e-9)
    columns = [0] * width
    for p in timeline.points:
        col = min(int(p.t / span * (width - 1)), width - 1) if len(timeline.points) > 1 else 0
        columns[col] = max(columns[col], p.used)
    for i in range(1, width):  # between sparse samples, hold the last value
        if columns[i] == 0:
            columns[i] = columns[i - 1]
    levels = [round(c / timeline.total * height * 8) for c in columns]
    rows = []
    for row in range(height, 0, -1):
        base = (row - 1) * 8
        rows.append("".join(BLOCKS[max(0, min(8, level - base))] for level in levels))
    return rows


def phase_row(timeline: StartupTimeline, width: int) -> str:
    """A line under the chart with the first letter of each phase where it began."""
    line = [" "] * width
    span = max(
        timeline.points[-1].t if timeline.points else 0.0,
        max((m.t for m in timeline.marks), default=0.0),
        1e-9,
    )
    for mark in timeline.marks:
        col = min(max(int(mark.t / span * (width - 1)), 0), width - 1)
        line[col] = mark.phase[0].upper()
    return "".join(line)


class TimelineChart(Widget):
    """Memory from launch to ready, with the phases marked under it."""

    @dataclass
    class Loaded(Message, bubble=False):
        """The newest launch record with a timeline was read (None: there is none)."""

        recorded: RecordedStartup | None

    timeline: reactive[StartupTimeline | None] = reactive(None)  # this window's launch
    recorded: reactive[RecordedStartup | None] = reactive(None)  # the newest record's

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._bound_at = 0.0  # when `timeline` was handed over (time.time())
        self._folder_seen: int | None = -1  # the launches folder's mtime at the last read

    def on_mount(self) -> None:
        self.border_title = "start-up memory"
        self._looker = self.set_interval(LOOK_S, self.look, pause=True)
        self.look()

    def on_show(self) -> None:
        self.look()
        self._looker.resume()

    def on_hide(self) -> None:
        self._looker.pause()

    def watch_timeline(self, timeline: StartupTimeline | None) -> None:
        self._bound_at = time.time()
        self.look()  # its record was saved just before: read it for the preset's name

    def look(self) -> None:
        """Read the newest launch record when the launches folder changed since the last
        read (a file saved or dropped changes the folder's mtime)."""
        from sparkdeck.guard.records import launches_dir

        folder = launches_dir()
        try:
            stamp: int | None = os.stat(folder).st_mtime_ns
        except OSError:
            stamp = None
        if stamp != self._folder_seen:
            self._folder_seen = stamp
            self._read(folder)

    @work(
        thread=True,
        exclusive=True,
        group="guard-timeline",
        name="read launch record",
        exit_on_error=False,
        description="read the newest launch record's timeline",
    )
    def _read(self, folder: os.PathLike[str]) -> None:
        from pathlib import Path

        self.post_message(self.Loaded(latest_recorded(Path(folder))))

    def on_timeline_chart_loaded(self, message: Loaded) -> None:
        # A record dropped with its engine keeps the chart; a read that finished late (an
        # older worker after a newer one) never replaces a newer record.
        new, shown = message.recorded, self.recorded
        if new is not None and (shown is None or new.saved_at >= shown.saved_at):
            self.recorded = new

    def on_worker_state_changed(self, event: Worker.StateChanged) -> None:
        report_worker_failure(self.app, event)  # StateChanged does not bubble

    def shown(self) -> tuple[StartupTimeline | None, RecordedStartup | None]:
        """The timeline to draw and its record (None: this window's own, not read back)."""
        bound, recorded = self.timeline, self.recorded
        if recorded is not None and (
            bound is None
            or recorded.saved_at >= self._bound_at
            or recorded.timeline == StartupTimeline.from_dict(bound.to_dict())
        ):
            return recorded.timeline, recorded
        return bound, None

    def render(self) -> RenderResult:
        timeline, recorded = self.shown()
        if timeline is None or not timeline.points:
            return Content("no start-up recorded yet")
        width = max(self.content_size.width, 10)
        title = []
        if recorded is not None:
            saved = time.strftime("%H:%M:%S", time.localtime(recorded.saved_at))
            title = [
                Content.styled(
                    f"{recorded.preset_id} ({recorded.container_name}), saved {saved}", "bold"
                )
            ]
        rows = chart_rows(timeline, width, max(self.content_size.height - 2 - len(title), 1))
        peak = timeline.peak_used / 2**30
        legend = ", ".join(f"{m.phase[0].upper()} {m.phase} {m.t:.1f} s" for m in timeline.marks)
        return Content("\n").join(
            [
                *title,
                *(Content.styled(r, "$accent") for r in rows),
                Content.styled(phase_row(timeline, width), "bold $warning"),
                Content(
                    f"peak {peak:.1f} GiB of {timeline.total / 2**30:.1f}; "
                    f"{legend or 'no phases seen in the log'}"
                ),
            ]
        )
