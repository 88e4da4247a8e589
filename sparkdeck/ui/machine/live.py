"""Panels of the dashboard that render telemetry snapshots (memory and pressure, GPU)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Self, cast

from textual.content import Content
from textual.geometry import Region, Size
from textual.strip import Strip
from textual.visual import Visual
from textual.widgets import Static

from sparkdeck.telemetry.view import Bar, Row, clock_spark_text

if TYPE_CHECKING:
    from textual.css.styles import RulesMap

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
    """A Static for text that is re-rendered every sample: cheap when nothing changed, and
    when little did.

    Re-rendering identical text, or asking for a layout pass when the widget's height cannot
    have changed, is most of what a 1 Hz panel costs (a layout pass re-arranges the whole
    screen); both are skipped here (see the benchmark). Identical means the same characters
    in the same styles: a level's colour that changes under the same figure is drawn.

    Text that changed in some of its lines repaints only those lines: the rows of each line
    are kept, a changed line is rendered on its own, and the frame draws only its rows. An
    engine card whose uptime moves each second re-rendered all seven of its lines for it (1.5
    of a 6 ms frame), and the frame's box around the changed rows grew with it
    (docs/performance.md). A line whose row count changes, a new line count, a new width,
    a theme or class change or a text selection renders the whole text anew, as Static does.
    """

    # (line, its rendered rows) for each line of the text shown, at _width; None: render anew
    _lines: list[tuple[Content, list[Strip]]] | None = None
    _width = -1
    _only: list[Region] | None = None  # while set_text updates: the rows it changed

    def __init__(self, content: Content | str = "", **kwargs: Any) -> None:
        super().__init__(content, **kwargs)
        # No links in a panel's figures: without auto_links a render does not look up the
        # link style (a walk up the DOM for its background) and a mouse move over the
        # panel does not repaint it
        self.set_reactive(Static.auto_links, False)
        self._shown: Content | str = content
        self._laid_out: tuple[int, int] | None = None  # (width, height) of the text shown

    def set_text(self, content: Content | str) -> None:
        if same_text(content, self._shown):
            return
        self._shown = content
        self._only = self._rows_changed_by(content)
        try:
            self.update(content, layout=False)
        finally:
            only, self._only = self._only, None
        if only is None and self._size_may_change():
            self.refresh(layout=True)

    def refresh(
        self, *regions: Region, repaint: bool = True, layout: bool = False, recompose: bool = False
    ) -> Self:
        if self._only is not None and not regions and not layout and not recompose:
            if self._only:  # the rows of the lines set_text changed, and no others
                super().refresh(*self._only, repaint=repaint)
            return self
        if repaint and not regions:
            self._lines = None  # all of it: a new text, a new size, a theme or class change
        return super().refresh(*regions, repaint=repaint, layout=layout, recompose=recompose)

    def render_line(self, y: int) -> Strip:
        if not self._by_line():
            return super().render_line(y)
        if self._lines is None or self._width != self.size.width:
            self._width = width = self.size.width
            self._lines = self._all_lines(cast(Content, self.content), width)
        for _, rows in self._lines:
            if y < len(rows):
                return rows[y]
            y -= len(rows)
        return Strip.blank(self.size.width, self.visual_style.rich_style)

    def _by_line(self) -> bool:
        """Whether the text is rendered a line at a time (else as Static renders it)."""
        return (
            isinstance(self.content, Content)
            and self.text_selection is None  # a selection spans lines
            and tuple(self.styles.content_align) == ("left", "top")
        )

    def _rows_of(self, index: int, line: Content, width: int) -> list[Strip]:
        """The rows of the text's line `index`. Rendered after `index` empty lines, so that
        its cells carry the offsets of the whole text (a mouse selection reads them)."""
        if index:
            lead = Content("\n" * index)
            return Visual.to_strips(self, lead + line, width, None, self.visual_style)[index:]
        return Visual.to_strips(self, line, width, None, self.visual_style)

    def _all_lines(self, content: Content, width: int) -> list[tuple[Content, list[Strip]]]:
        """Each line of `content` with its rows: the whole text rendered at once, as Static
        renders it, and its rows dealt out by each line's height (one render, where a line
        at a time would render each after all the lines before it as empty ones)."""
        lines = content.split("\n", allow_blank=True)
        rows = Visual.to_strips(self, content, width, None, self.visual_style)
        rules = cast("RulesMap", self.styles)  # what Textual's own height measure passes
        heights = [line.get_height(rules, width) for line in lines]
        if sum(heights) != len(rows):  # not expected: then a line at a time, surely right
            return [(line, self._rows_of(n, line, width)) for n, line in enumerate(lines)]
        kept: list[tuple[Content, list[Strip]]] = []
        for line, height in zip(lines, heights, strict=True):
            kept.append((line, rows[:height]))
            rows = rows[height:]
        return kept

    def _rows_changed_by(self, content: Content | str) -> list[Region] | None:
        """Render the lines of `content` that differ from those shown, keep them, and
        return the rows they take (in the widget's content); None when the whole text is to
        be rendered anew (see the class)."""
        shown, width = self._lines, self._width
        if shown is None or not isinstance(content, Content) or width != self.size.width:
            return None
        if not self._by_line():
            return None
        lines = content.split("\n", allow_blank=True)
        if len(lines) != len(shown):
            return None
        kept: list[tuple[Content, list[Strip]]] = []
        changed: list[Region] = []
        row = 0
        for index, (line, (before, rows)) in enumerate(zip(lines, shown, strict=True)):
            if not same_text(line, before):
                new_rows = self._rows_of(index, line, width)
                if len(new_rows) != len(rows):
                    return None  # the text's height changes: lay it out again
                changed.append(Region(0, row, width, len(rows)))
                rows = new_rows
            kept.append((line, rows))
            row += len(rows)
        self._lines = kept
        return changed

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
    """A label, a fixed-scale sparkline of the last `span_s` seconds as wide as the row
    (its cells stretches of the clock: view.clock_spark_text), and the newest value."""

    def __init__(self, label: str, unit: str, span_s: float, **kwargs: Any) -> None:
        super().__init__("", **kwargs)
        self.label = label
        self.unit = unit
        self.span_s = span_s
        self._points: Sequence[tuple[float, float]] = ()
        self._high = 100.0

    def show(self, points: Sequence[tuple[float, float]], high: float) -> None:
        """(taken_at, value) points, oldest first, on a scale of 0..high."""
        self._points, self._high = points, high
        self._draw()

    def on_resize(self) -> None:
        self._draw()

    def _draw(self) -> None:
        points = self._points
        now = f" {points[-1][1]:5.1f}{self.unit}" if points else " " * (6 + len(self.unit))
        width = self.content_size.width - LABEL_WIDTH - 1 - len(now)
        self.set_text(
            Content.assemble(
                (self.label.ljust(LABEL_WIDTH + 1), "$text-muted"),
                (clock_spark_text(points, width, self._high, self.span_s), "$primary"),
                now,
            )
        )
