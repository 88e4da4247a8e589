"""The dashboard's containers that draw nothing of their own are BLANK (sparkdeck.ui.screen_layout):
a frame that draws a new sample renders them as rows of their background, not line by line
through Textual's styles cache, and the screen looks exactly as it did when they were drawn
that way.

The real app on Textual's Pilot, offline (Docker unreachable, the host's own telemetry).
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from textual.widget import Widget

from sparkdeck.ui.dashboard.side_tabs import BlankTabPane, BlankTabs
from sparkdeck.ui.screen_layout import BlankColumn, BlankRow
from tests.support.offline_app import make_app, text_of
from tests.support.pane_host import wait_until

BLANK_CLASSES = (BlankColumn, BlankRow, BlankTabs, BlankTabPane)


def svg_drawing(svg: str) -> str:
    """A screenshot without its id: Rich names an SVG's styles after a hash of the rows'
    segments, and that hash covers what is not drawn too (the cell offsets Textual's styles
    cache puts in each row's style, for a mouse selection; a container's background has
    nothing to select)."""
    return re.sub(r"terminal-\d+", "terminal", svg)


def draws_something(widget: Widget) -> bool:
    """A border or a border title: what BLANK would not draw."""
    edges = (widget.styles.border_top, widget.styles.border_bottom)
    return any(kind not in ("", "none", "hidden") for kind, _ in edges) or bool(widget.border_title)


def rendered_with(widget: Widget) -> list[Widget]:
    """The containers a frame that repaints `widget` renders too: those it sits in (below
    the screen) and the containers beside it and them (Textual renders every widget whose
    container overlaps the repainted rows). Not those made inside Textual's own widgets
    (TabbedContent's ContentSwitcher and ContentTabs): not sparkdeck's to make blank."""
    above = widget.ancestors[:-2]  # not the screen, not the app
    beside = [child for parent in above for child in parent.children if child.children]
    return [
        container
        for container in dict.fromkeys([*above, *beside])
        if not type(container).__module__.startswith("textual.widgets")
    ]


@pytest.mark.anyio
async def test_the_containers_around_a_sparkline_draw_nothing_of_their_own(tmp_path: Path):
    """Every frame with a new sample repaints the sparkline rows; the containers around them
    are then rendered too. Each that shows nothing but its background is blank (the panels
    with their borders are not)."""
    app, _ = make_app(tmp_path)
    async with app.run_test(size=(120, 40)) as pilot:
        await wait_until(pilot, lambda: bool(app.query("#memory-spark")), what="the side tabs")
        for spark in ("#memory-spark", "#psi-spark"):
            around = rendered_with(app.query_one(spark))
            plain = [
                type(widget).__name__
                for widget in around
                if not widget.BLANK and not draws_something(widget)
            ]
            assert plain == [], f"containers around {spark} drawn line by line: {plain}"
            blank = {widget.id or type(widget).__name__ for widget in around if widget.BLANK}
            assert {"main-area", "left-area", "side-area", "side-tabs", "machine-tab"} <= blank
            assert {"machine-body", "BlankRow"} <= blank, blank


@pytest.mark.anyio
async def test_the_screens_own_children_are_blank_containers_but_the_log(tmp_path: Path):
    """Each child of the screen has the whole screen as its container, so every frame renders
    it, whatever rows changed: the header, the glance strip, the guard line and the footer
    each sit in a blank container of their own. The log pane is sized as a share of the
    screen (40 % of what the header and footer leave), which it cannot be inside one."""
    app, _ = make_app(tmp_path)
    async with app.run_test(size=(120, 40)) as pilot:
        await wait_until(pilot, lambda: bool(app.query("#memory-spark")), what="the side tabs")
        drawn = [
            widget.id or type(widget).__name__
            for widget in app.screen.children
            if not widget.BLANK and not type(widget).__module__.startswith("textual.")
        ]
        assert drawn == ["log-pane"], drawn
        held = {child.parent.id for child in app.query("Header, GlanceStrip, WatchdogLine, Footer")}
        assert held == {"header-area", "glance-area", "watchdog-area", "footer-area"}, held


@pytest.mark.anyio
@pytest.mark.parametrize("size", [(120, 40), (80, 24)])
async def test_blank_containers_look_the_same_as_drawn_ones(
    tmp_path: Path, size: tuple[int, int], monkeypatch: pytest.MonkeyPatch
):
    """The same screen, cell for cell and style for style, with the containers blank and
    with each of them rendered by Textual's styles cache."""
    app, _ = make_app(tmp_path)
    async with app.run_test(size=size) as pilot:
        await wait_until(
            pilot,
            lambda: (
                bool(app.query("#memory-bars")) and "GiB" in text_of(app.query_one("#memory-bars"))
            ),
            what="a telemetry sample drawn",
        )
        await pilot.pause(0.3)
        machine = app.query_one("#machine-tab")
        shown = [w for w in app.screen.walk_children(Widget) if isinstance(w, BLANK_CLASSES)]
        assert machine in shown and len(shown) >= 6, shown
        # the host's own telemetry moves, a toast times out: neither while the two are taken
        app.query_one("#machine-body").workers.cancel_group(
            app.query_one("#machine-body"), "telemetry"
        )
        app.clear_notifications()
        await pilot.pause(0.2)
        blank = app.export_screenshot()
        for cls in BLANK_CLASSES:
            monkeypatch.setattr(cls, "BLANK", False)
        app.screen.refresh(repaint=True)
        for widget in shown:
            widget.refresh()
        await pilot.pause(0.2)
        drawn = app.export_screenshot()
        assert svg_drawing(drawn) == svg_drawing(blank)
        assert drawn != blank  # the styles cache did draw them: rows with their cells' offsets
