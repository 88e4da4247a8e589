"""Panels of the dashboard that render telemetry snapshots (memory and pressure, GPU)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from textual.content import Content
from textual.geometry import Size
from textual.widgets import Static

from sparkdeck.telemetry.view import Bar, Row, spark_text

LABEL_WIDTH = 9
BAR_WIDTH = 10

# The level words of sparkdeck.telemetry.view, as theme-variable styles.
LEVEL_STYLE = {
    "": "",
    "muted": "$text-muted",
    "success": "$success",
    "warning": "$warning",
    "error": "bold $error",
}


def rows_content(rows: list[Row], label_width: int = LABEL_WIDTH) -> Content:
    """Label in bold, then the text in its level's colour; one row a line. A label as long
    as the column still gets a space after it (a rail's ` dc_input` ran into its watts)."""
    return Content("\n").join(
        Content.assemble(
            (f"{row.label:<{label_width - 1}} ", "bold"), (row.value, LEVEL_STYLE[row.level])
        )
        for row in rows
    )


def bar_content(bar: Bar, width: int = BAR_WIDTH, label_width: int = LABEL_WIDTH) -> Content:
    """`label ███████░░░ text`: the filled part in the bar's level colour."""
    filled = max(0, min(width, round(bar.fraction * width)))
    style = {"": "$primary", "muted": "$secondary"}.get(bar.level, LEVEL_STYLE[bar.level])
    return Content.assemble(
        (bar.label.ljust(label_width), "bold"),
        ("█" * filled, style),
        ("░" * (width - filled), "$text-disabled"),
        " ",
        (bar.text, LEVEL_STYLE[bar.level] if bar.level == "error" else ""),
    )


class LiveText(Static):
    """A Static for text that is re-rendered every sample: cheap when nothing changed.

    Re-rendering identical text, or asking for a layout pass when the widget's height cannot
    have changed, is most of what a 1 Hz panel costs (a layout pass re-arranges the whole
    screen); both are skipped here (see the benchmark). Identical means the same characters
    in the same styles: a level's colour that changes under the same figure is drawn.
    """

    def __init__(self, content: Content | str = "", **kwargs: Any) -> None:
        super().__init__(content, **kwargs)
        self._shown: Content | str = content
        self._laid_out: tuple[int, int] | None = None  # (width, height) of the text shown

    def set_text(self, content: Content | str) -> None:
        if same_text(content, self._shown):
            return
        self._shown = content
        self.update(content, layout=False)
        if self._size_may_change():
            self.refresh(layout=True)

    def _size_may_change(self) -> bool:
        """Whether the text now shown may take another size than the last: never for a
        fixed height (a one-row line), else its height at this width against the last."""
        width, height = self.styles.width, self.styles.height
        if width is not None and width.is_auto:
            return True  # its width follows the text
        if height is not None and not height.is_auto:
            return False  # cells, a share of the room: set by the stylesheet, not the text
        room = self.content_size.width
        if not room:  # not laid out yet, or hidden: its first layout measures it anyway
            self._laid_out = None
            return False
        # the new text's height at this width (Textual's own measure, for the new text:
        # update() dropped the cached one)
        size = (room, self.get_content_height(Size(0, 0), self.app.size, room))
        before, self._laid_out = self._laid_out, size
        return size != before


def same_text(a: Content | str, b: Content | str) -> bool:
    """The same characters in the same styles (Content's own == compares characters only)."""
    if isinstance(a, Content) and isinstance(b, Content):
        return a.plain == b.plain and a.spans == b.spans
    return type(a) is type(b) and a == b


class SparkRow(LiveText):
    """A label, a fixed-scale sparkline as wide as the row, and the newest value."""

    def __init__(self, label: str, unit: str, **kwargs: Any) -> None:
        super().__init__("", **kwargs)
        self.label = label
        self.unit = unit
        self._values: Sequence[float] = ()
        self._high = 100.0

    def show(self, values: Sequence[float], high: float) -> None:
        self._values, self._high = values, high
        self._draw()

    def on_resize(self) -> None:
        self._draw()

    def _draw(self) -> None:
        now = f" {self._values[-1]:5.1f}{self.unit}" if self._values else " " * (6 + len(self.unit))
        width = self.content_size.width - LABEL_WIDTH - 1 - len(now)
        self.set_text(
            Content.assemble(
                (self.label.ljust(LABEL_WIDTH + 1), "$text-muted"),
                (spark_text(self._values, width, self._high), "$primary"),
                now,
            )
        )
