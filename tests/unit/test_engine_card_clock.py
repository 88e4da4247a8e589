"""The engine card's uptime: it moves with the telemetry samples, and on the card's own timer
only while no samples come; that timer sleeps while they do (a timer that woke the window
every second found a sample had already moved the uptime: docs/performance.md, 2026-12-05).

The card is the real EngineCard in a host app on Textual's Pilot, its clock a real one; the
samples are the calls the machine tab's handler makes (`sampled`), on the real event loop.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import pytest
from textual.app import App, ComposeResult
from textual.pilot import Pilot
from textual.timer import Timer

from sparkdeck.runtime.state import docker_time
from sparkdeck.ui import STYLESHEET
from sparkdeck.ui.dashboard.engine_card import SAMPLES_LATE_S, EngineCard, EngineReport
from sparkdeck.ui.readers import EngineReading
from tests.support.offline_app import NOW, engine_state
from tests.support.pane_host import wait_until


class Host(App):
    CSS_PATH = STYLESHEET

    def __init__(self, clock: list[float]) -> None:
        super().__init__()
        self.clock = clock

    def compose(self) -> ComposeResult:
        yield EngineCard(lambda: self.clock[0], id="engine-card")


@asynccontextmanager
async def running_engine_card() -> AsyncIterator[tuple[Pilot, EngineCard, list[float]]]:
    """The card of a running engine up 2 min 5 s (its card reads "2m": whole minutes); the
    clock moves by hand."""
    clock = [NOW]
    app = Host(clock)
    async with app.run_test(size=(60, 12)) as pilot:
        card = app.query_one(EngineCard)
        card.report = EngineReport(reading=EngineReading(engine_state("running"), True))
        await pilot.pause()
        yield pilot, card, clock


STARTED = docker_time(engine_state("running").started_at)  # NOW is 2m 05.4s later


def uptime(card: EngineCard) -> str:
    return next(line for line in card.render().plain.splitlines() if "uptime" in line)


@pytest.fixture
def uptime_timer_ticks(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    """When the card woke the window's event loop of its own accord, not for a sample: its
    own second (`_own_second`, a loop callback) or, as the card once had, a Textual timer
    named "uptime" running its callback."""
    ticks: list[float] = []
    real_tick = Timer._tick

    async def counted(self: Timer, *, next_timer: float, count: int) -> None:
        if self.name == "uptime":
            ticks.append(time.monotonic())
        await real_tick(self, next_timer=next_timer, count=count)

    monkeypatch.setattr(Timer, "_tick", counted)
    own_second = getattr(EngineCard, "_own_second", None)
    if own_second is not None:

        def counted_second(self: EngineCard) -> None:
            ticks.append(time.monotonic())
            own_second(self)

        monkeypatch.setattr(EngineCard, "_own_second", counted_second)
    return ticks


@pytest.mark.anyio
async def test_the_uptime_rides_on_the_samples_and_the_cards_timer_sleeps_meanwhile(
    uptime_timer_ticks: list[float],
) -> None:
    async with running_engine_card() as (pilot, card, clock):
        # samples every 0.5 s (a launch's rate) for 3 s, across the third minute: the card
        # reads the new minute at the sample after it began
        clock[0] += 53.0  # up 2m 58.4s
        began = time.monotonic()
        while time.monotonic() - began < 3.0:
            clock[0] += 0.5
            card.sampled()
            await pilot.pause(0.5)
            up = clock[0] - STARTED
            assert uptime(card).endswith("3m" if up >= 180.0 else "2m"), (up, uptime(card))
        assert uptime(card).endswith("3m"), uptime(card)
        assert uptime_timer_ticks == [], "the card's own timer woke while samples came"

        # the samples stop (a stalled sampler): the card keeps its own second
        stopped = time.monotonic()
        clock[0] += 60.0
        await wait_until(pilot, lambda: bool(uptime_timer_ticks), timeout=SAMPLES_LATE_S + 1.5)
        assert uptime_timer_ticks[0] - stopped < SAMPLES_LATE_S + 0.5
        assert uptime(card).endswith("4m"), uptime(card)
        clock[0] += 60.0
        await wait_until(pilot, lambda: uptime(card).endswith("5m"), timeout=1.5)

        # samples again: the card's timer goes back to sleep (no more own ticks)
        for _ in range(4):
            clock[0] += 0.5
            card.sampled()
            await pilot.pause(0.5)
        woke = len(uptime_timer_ticks)
        clock[0] += 60.0
        for _ in range(4):
            clock[0] += 0.5
            card.sampled()
            await pilot.pause(0.5)
        assert len(uptime_timer_ticks) == woke, "the card's timer ran beside the samples"
        assert uptime(card).endswith("6m"), uptime(card)


@pytest.mark.anyio
async def test_with_no_sample_yet_the_card_keeps_its_own_second(
    uptime_timer_ticks: list[float],
) -> None:
    """Before the side tabs are mounted no sample has come: the card's timer moves it."""
    async with running_engine_card() as (pilot, card, clock):
        assert uptime(card).endswith("2m"), uptime(card)
        clock[0] += 60.0
        await wait_until(pilot, lambda: uptime(card).endswith("3m"), timeout=1.5)
        assert uptime_timer_ticks
        # a stopped engine shows no uptime: the timer sleeps
        card.report = EngineReport(reading=EngineReading(engine_state("exited", 0), False))
        await pilot.pause(0.2)
        woke = len(uptime_timer_ticks)
        await pilot.pause(2.5)
        assert len(uptime_timer_ticks) <= woke + 1  # the wake already under way, no more
