"""A window with an engine ready redraws what changed, at the rate it changes, in as few frames
as it can, and re-arranges the screen only when something's size changed (issue 31: its idle
CPU with an engine ready).

A layout pass re-arranges every widget on the screen; asked for by each panel that drew a
new figure (the engine card's uptime, the guard line's numbers, the metrics), it was most of
what a window with an engine ready cost each second. The passes are counted with Textual's
own signal (`Screen.screen_layout_refresh_signal`, published at each one) on the real app,
with a real service, Docker daemon and llama-server engine; the widget's rules (a colour
change is drawn, a wrapped line does get its rows) on a bare host app.
"""

from __future__ import annotations

import time

import pytest
from textual.content import Content

from sparkdeck.ui.machine.live import LiveText
from tests.support.cli import run_cli
from tests.support.pane_host import WidgetHost, wait_until
from tests.support.service_env import (  # noqa: F401 - a fixture
    service_env,
    tiny_preset,
)

WINDOW_S = 5.0  # five of the service's samples and metrics readings


@pytest.mark.anyio
async def test_a_colour_that_changes_under_the_same_figure_is_drawn():
    """The memory bar's figure can stay while its level (and colour) moves: Content's own ==
    compares characters only, and such a change was dropped."""
    text = LiveText("", id="t")
    async with WidgetHost(text, css_path=None).run_test(size=(40, 5)) as pilot:
        text.set_text(Content.styled("avail 5.0 GiB", "green"))
        await pilot.pause()
        text.set_text(Content.styled("avail 5.0 GiB", "red"))
        await pilot.pause()
        shown = text.content
        assert isinstance(shown, Content)
        assert [span.style for span in shown.spans] == ["red"], shown.spans


@pytest.mark.anyio
async def test_text_that_needs_more_rows_gets_them_and_the_same_rows_ask_no_layout():
    text = LiveText("", id="t")
    async with WidgetHost(text, css_path=None).run_test(size=(20, 10)) as pilot:
        layouts: list[int] = []
        pilot.app.screen.screen_layout_refresh_signal.subscribe(
            pilot.app.screen, lambda _screen: layouts.append(text.size.height)
        )
        text.set_text(Content("one line"))
        await wait_until(pilot, lambda: text.size.height == 1, timeout=2, what="one row")
        await pilot.pause()
        passes = len(layouts)
        text.set_text(Content("another line"))  # the same one row: no layout pass
        await pilot.pause()
        await pilot.pause()
        assert len(layouts) == passes and text.content == "another line", layouts
        # one line still, but wider than the 20 columns: it wraps onto a second row (the
        # newline count alone said "same height", and its end was cut off)
        text.set_text(Content("a line that is wider than twenty columns"))
        await wait_until(pilot, lambda: text.size.height == 2, timeout=2, what="two rows")
        text.set_text(Content("three\nshort\nlines"))
        await wait_until(pilot, lambda: text.size.height == 3, timeout=2, what="three rows")


@pytest.mark.docker
@pytest.mark.llama
@pytest.mark.anyio
async def test_a_window_with_an_engine_ready_lays_out_nothing_while_its_figures_move(
    service_env, isolated_dirs, scope, llama_image, monkeypatch
):
    from sparkdeck.catalog import load_catalog
    from sparkdeck.config.settings import Settings
    from sparkdeck.runtime.client import DockerRuntime
    from sparkdeck.ui.app import SparkdeckApp
    from sparkdeck.ui.machine.tab import MachineTab
    from sparkdeck.ui.metrics.tab import MetricsTab
    from tests.support.offline_app import engine_text, text_of

    tiny_preset(isolated_dirs, llama_image, "quiet-tiny")
    assert run_cli("service", "start", env=service_env).returncode == 0
    launched = run_cli("launch", "quiet-tiny", "--no-flush", "--yes", env=service_env, timeout=120)
    assert launched.returncode == 0, launched.stderr
    monkeypatch.setenv("SPARKDECK_SERVICE", "auto")
    monkeypatch.setenv("SPARKDECK_SCOPE", scope)

    samples: list[float] = []  # telemetry samples the machine tab drew
    readings: list[float] = []  # engine-metrics readings handed to the strip

    def hook(message) -> None:
        if isinstance(message, MachineTab.TelemetrySampled):
            samples.append(time.monotonic())
        elif isinstance(message, MetricsTab.TrailSampled) and message.trail:
            readings.append(time.monotonic())

    app = SparkdeckApp(
        load_catalog,
        lambda: DockerRuntime.connect(scope=scope),
        settings=Settings(),
        flush=False,
    )
    async with app.run_test(size=(120, 40), message_hook=hook) as pilot:
        guard_line = app.query_one("#watchdog-line")
        await wait_until(
            pilot,
            lambda: "state    ready" in engine_text(app) and "quiet-tiny" in engine_text(app),
            timeout=30,
            what=lambda: f"the engine ready on the card, not {engine_text(app)!r}",
        )
        await wait_until(
            pilot,
            lambda: "memory guard (service)" in text_of(guard_line) and len(readings) >= 2,
            timeout=15,
            what=lambda: f"the service's guard and metrics, not {text_of(guard_line)!r}",
        )
        await pilot.pause(2.0)  # the log's start-up lines and the first samples drawn

        card = app.query_one("#engine-card")
        ticks: list[float] = []  # when the card's text changed (its uptime moved)
        set_text = card.set_text

        def observed(content) -> None:
            if content.plain != text_of(card):
                ticks.append(time.monotonic())
            set_text(content)

        card.set_text = observed  # type: ignore[method-assign]
        layouts: list[float] = []
        app.screen.screen_layout_refresh_signal.subscribe(
            app.screen, lambda _screen: layouts.append(time.monotonic())
        )
        cards: list[str] = []  # the engine card's text, looked at every 0.1 s
        drawn, rated = len(samples), len(readings)
        began = time.monotonic()
        while time.monotonic() - began < WINDOW_S:
            if not cards or cards[-1] != engine_text(app):
                cards.append(engine_text(app))
            await pilot.pause(0.1)

        # What the user sees moved at its rate: each of the service's samples and metrics
        # readings drawn, and the card's uptime (whole minutes) at most once ...
        uptimes = {line for card in cards for line in card.splitlines() if "uptime" in line}
        assert 1 <= len(uptimes) <= 2, cards
        assert len(samples) - drawn >= WINDOW_S - 1, samples
        assert len(readings) - rated >= WINDOW_S - 1, readings
        # ... and not one of those figures re-arranged the screen (before: a layout pass for
        # each, several a second)
        assert layouts == [], [round(t - began, 2) for t in layouts]
        # The card's text changed at most once, when a new minute of uptime began (before:
        # a new second at each sample, a repaint of the card and of the presets beside it),
        # and then as a sample was drawn, in its frame (before that: a frame of its own
        # each second, at the card's own timer's phase)
        window = [tick for tick in ticks if tick >= began]
        assert len(window) <= 1, [round(t - began, 2) for t in ticks]
        apart = [min(abs(tick - sample) for sample in samples) for tick in window]
        assert all(a < 0.1 for a in apart), [round(a, 3) for a in apart]
