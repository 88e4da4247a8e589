"""The guard tab's start-up timeline chart: used memory from launch to ready, with phases."""

from __future__ import annotations

from textual.app import RenderResult
from textual.content import Content
from textual.reactive import reactive
from textual.widget import Widget

from sparkdeck.guard.timeline import StartupTimeline

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
    span = max(timeline.points[-1].t if timeline.points else 0.0,
               max((m.t for m in timeline.marks), default=0.0), 1e-9)
    for mark in timeline.marks:
        col = min(max(int(mark.t / span * (width - 1)), 0), width - 1)
        line[col] = mark.phase[0].upper()
    return "".join(line)


class TimelineChart(Widget):
    """Memory from launch to ready, with the phases marked under it."""

    timeline: reactive[StartupTimeline | None] = reactive(None)

    def on_mount(self) -> None:
        self.border_title = "start-up memory"

    def render(self) -> RenderResult:
        timeline = self.timeline
        if timeline is None or not timeline.points:
            return Content("no start-up recorded yet")
        width = max(self.content_size.width, 10)
        rows = chart_rows(timeline, width, max(self.content_size.height - 2, 1))
        peak = timeline.peak_used / 2**30
        legend = ", ".join(f"{m.phase[0].upper()} {m.phase} {m.t:.1f} s" for m in timeline.marks)
        return Content("\n").join([
            *(Content.styled(r, "$accent") for r in rows),
            Content.styled(phase_row(timeline, width), "bold $warning"),
            Content(f"peak {peak:.1f} GiB of {timeline.total / 2**30:.1f}; "
                    f"{legend or 'no phases seen in the log'}"),
        ])
