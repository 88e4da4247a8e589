"""A LiveText whose text changed in some lines repaints only those lines, and draws exactly
what a Static given the same text draws (issue 31: a ready engine's card re-rendered all seven
of its lines for the uptime each second).

Each test hosts a LiveText beside a plain Static, both with the same border and width, and
gives both the same texts: the Static is the reference for every cell and style. The rows a
frame asks for are counted through render_line, the hook Textual's styles cache calls for
each row it has to draw anew. A panel in a tab not shown (the machine tab's, while another
is open) has no size: nothing of it is rendered until it is shown.
"""

from __future__ import annotations

import pytest
from textual.app import App, ComposeResult
from textual.content import Content
from textual.geometry import Region
from textual.strip import Strip
from textual.visual import Visual
from textual.widgets import Static, TabbedContent, TabPane

from sparkdeck.ui.machine.live import LiveText, SparkRow
from tests.support.pane_host import WidgetHost

CSS = """
#live, #ref { width: 40; height: auto; border: round $primary; padding: 0 1; }
.alarm { color: red; background: $error 20%; }
"""


class RowCounter:
    """Records which rows Textual asked the widget (a LiveText) to render."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.asked: list[int] = []

    def render_line(self, y: int) -> Strip:
        self.asked.append(y)
        return super().render_line(y)  # type: ignore[misc]


class CountingLiveText(RowCounter, LiveText):
    """A LiveText that records which rows Textual asked it to render."""


class Host(WidgetHost):
    CSS = CSS


def card(uptime: str, model: str = "Qwen/Qwen3-8B") -> Content:
    """Seven lines in the engine card's shape: labels in bold, one value styled."""
    rows = [
        ("state", Content.styled("ready", "$success")),
        ("preset", Content("vllm-ngc  vllm")),
        ("address", Content("http://127.0.0.1:8000")),
        ("uptime", Content(uptime)),
        ("model", Content.styled(model, "$text-muted")),
        ("gpu", Content("0.70 of memory")),
        ("since", Content("12:00")),
    ]
    return Content("\n").join(
        Content.assemble((f"{label:<8} ", "bold"), value) for label, value in rows
    )


def drawn(widget: Static) -> list[list[tuple[str, object]]]:
    """Every row of the widget as the screen gets it: each segment's text and style."""
    region = Region(0, 0, widget.outer_size.width, widget.outer_size.height)
    return [[(seg.text, seg.style) for seg in strip] for strip in widget.render_lines(region)]


async def show(pilot, live: LiveText, ref: Static, text: Content) -> None:
    """Give both widgets `text` and let the frames that follow draw it."""
    live.set_text(text)
    ref.update(text)
    await pilot.pause()
    await pilot.pause()


@pytest.mark.anyio
async def test_a_changed_line_repaints_its_row_only_and_draws_what_a_static_draws():
    live, ref = CountingLiveText("", id="live"), Static("", id="ref")
    async with Host(live, ref, css_path=None).run_test(size=(84, 24)) as pilot:
        await show(pilot, live, ref, card("0m 01s"))
        assert drawn(live) == drawn(ref)
        live.asked.clear()
        await show(pilot, live, ref, card("0m 02s"))
        # the uptime is the fourth line, one row: the frame asked for that row alone
        assert live.asked == [3], live.asked
        assert drawn(live) == drawn(ref)
        assert "0m 02s" in "".join(text for row in drawn(live) for text, _ in row)


@pytest.mark.anyio
async def test_a_wrapped_line_that_changes_within_its_rows_repaints_them_and_matches():
    long_model = "org/a-model-name-long-enough-to-wrap-onto-two-rows"
    live, ref = CountingLiveText("", id="live"), Static("", id="ref")
    async with Host(live, ref, css_path=None).run_test(size=(84, 24)) as pilot:
        await show(pilot, live, ref, card("0m 01s", long_model))
        assert live.size.height == ref.size.height == 9  # the model takes three rows
        live.asked.clear()
        await show(pilot, live, ref, card("0m 01s", long_model.replace("long", "LONG")))
        assert sorted(set(live.asked)) == [4, 5, 6], live.asked  # the model's rows only
        assert drawn(live) == drawn(ref)


@pytest.mark.anyio
async def test_a_line_that_needs_another_row_count_lays_out_and_draws_it_all():
    live, ref = CountingLiveText("", id="live"), Static("", id="ref")
    async with Host(live, ref, css_path=None).run_test(size=(84, 24)) as pilot:
        await show(pilot, live, ref, card("0m 01s"))
        await show(pilot, live, ref, card("0m 01s", "org/a-model-name-long-enough-to-wrap"))
        assert live.size.height == ref.size.height == 8
        assert drawn(live) == drawn(ref)
        # and fewer lines than before: no row of the old text is left behind
        await show(pilot, live, ref, Content("stopped"))
        assert live.size.height == 1
        assert drawn(live) == drawn(ref)


def other_theme(app, live: LiveText, ref: Static) -> None:
    app.theme = "textual-light" if app.theme != "textual-light" else "nord"


def alarm_class(app, live: LiveText, ref: Static) -> None:
    live.add_class("alarm")
    ref.add_class("alarm")


@pytest.mark.anyio
@pytest.mark.parametrize("change", [other_theme, alarm_class])
async def test_a_theme_or_class_change_redraws_every_line_in_the_new_colours(change):
    live, ref = LiveText("", id="live"), Static("", id="ref")
    async with Host(live, ref, css_path=None).run_test(size=(84, 24)) as pilot:
        await show(pilot, live, ref, card("0m 01s"))
        before = drawn(live)
        change(pilot.app, live, ref)
        await pilot.pause()
        await pilot.pause()
        assert drawn(live) == drawn(ref)
        assert drawn(live) != before  # the colours did change: the comparison means something


class TabsHost(App[None]):
    """The LiveText in the first of two tabs, as the machine tab's panels are."""

    CSS = CSS

    def __init__(self, live: LiveText, ref: Static) -> None:
        super().__init__()
        self.live, self.ref = live, ref

    def compose(self) -> ComposeResult:
        with TabbedContent(id="tabs"):
            with TabPane("machine", id="first"):
                yield self.live
                yield self.ref
            with TabPane("chat", id="second"):
                yield Static("another tab")


@pytest.mark.anyio
async def test_a_panel_in_a_tab_not_shown_renders_nothing_until_it_is_shown(monkeypatch):
    live, ref = LiveText("", id="live"), Static("", id="ref")
    async with TabsHost(live, ref).run_test(size=(84, 24)) as pilot:
        await show(pilot, live, ref, card("0m 01s"))
        pilot.app.query_one(TabbedContent).active = "second"
        await pilot.pause()
        await pilot.pause()
        rendered: list[int] = []
        to_strips = Visual.to_strips.__func__  # type: ignore[attr-defined]

        def counting(cls, widget, *args, **kwargs):
            if widget is live:
                rendered.append(1)
            return to_strips(cls, widget, *args, **kwargs)

        monkeypatch.setattr(Visual, "to_strips", classmethod(counting))
        for second in range(2, 6):
            await show(pilot, live, ref, card(f"0m 0{second}s"))
        assert rendered == [], "Textual's renderer ran for a panel nobody sees"
        pilot.app.query_one(TabbedContent).active = "first"
        await pilot.pause()
        await pilot.pause()
        assert drawn(live) == drawn(ref)
        assert rendered  # and once shown, the changed line is drawn


class CountingSparkRow(RowCounter, SparkRow):
    """A SparkRow that records which rows Textual asked it to render."""


@pytest.mark.anyio
async def test_a_five_minute_sparkline_of_still_values_repaints_once_a_cell_not_once_a_sample():
    """An idle machine's memory line, one sample a second from the window's start: the row
    is repainted when the line moves on by a cell (5 minutes over its width), not at each
    sample. Growing a cell per sample, it repainted every second for the window's first
    half-minute: a frame a second (benchmarks/tui_idle.py)."""
    row = CountingSparkRow("used 5m", " %", 300.0, id="live")
    async with Host(row, css_path=None).run_test(size=(84, 24)) as pilot:
        await pilot.pause()
        points: list[tuple[float, float]] = []
        lines = []
        for second in range(40):
            points.append((10_005.0 + second, 42.0))
            row.show(tuple(points), 100.0)
            await pilot.pause()
            lines.append(str(row.content))
            if second == 0:
                row.asked.clear()  # drawn: from here on, what each sample repaints
        # 36 cells inside the border and padding, less the label and the newest value
        width = row.content_size.width - 9 - 1 - len("  42.0 %")
        assert width == 18
        cells = {int(t // (300.0 / width)) for t, _ in points}  # 16.7 s each: 3 in 40 s
        assert len(cells) == 3
        assert len(set(lines)) == len(cells), lines  # a new text only as the line moves on
        assert lines[-1].count("▃") == len(cells) and "42.0 %" in lines[-1]
        assert len(row.asked) == len(cells) - 1, row.asked  # once at each move, no more
