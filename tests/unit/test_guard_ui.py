"""The guard's UI pieces, each alone inside a tiny host App, driven with Pilot."""

from __future__ import annotations

import threading

import pytest

from sparkdeck.config.settings import GuardSettings
from sparkdeck.guard.claims import GIB, MemoryClaim
from sparkdeck.guard.fit import check_fit
from sparkdeck.guard.policy import WatchdogPolicy
from sparkdeck.guard.switch import switch_progress
from sparkdeck.guard.timeline import PhaseMark, StartupTimeline, TimelinePoint
from sparkdeck.host.meminfo import MemorySnapshot
from sparkdeck.ui.guard.screens import FitModal, SwitchWaitScreen
from sparkdeck.ui.guard.timeline import TimelineChart, chart_rows, phase_row
from sparkdeck.ui.guard.watchdog_line import WatchdogLine
from tests.support.guard_readings import recording
from tests.support.pane_host import WidgetHost

TOTAL = 100 * GIB  # fake pool size for the pictures


def does_not_fit():
    memory = MemorySnapshot(TOTAL, 40 * GIB, 30 * GIB, 10 * GIB, 0, 0, 0)
    return check_fit(MemoryClaim(80 * GIB, "0.8 x MemTotal"), memory, headroom=5 * GIB)


@pytest.mark.anyio
async def test_fit_modal_shows_numbers_and_cancels_by_default():
    app = WidgetHost()
    async with app.run_test() as pilot:
        app.push_screen(FitModal("big", does_not_fit()), app.results.append)
        await pilot.pause()
        text = " ".join(str(s.render()) for s in app.screen.query("Static"))
        assert "big does not fit" in text and "MemAvailable:   40.0 GiB" in text
        assert "needs 85.0 GiB" in text
        await pilot.press("enter")  # the focused button is Cancel
        await pilot.pause()
        assert app.results == [False]
        app.push_screen(FitModal("big", does_not_fit()), app.results.append)
        await pilot.pause()
        await pilot.click("#launch-anyway")
        await pilot.pause()
        assert app.results == [False, True]


@pytest.mark.anyio
async def test_switch_wait_screen_follows_progress_and_skips_only_on_the_second_press():
    skip = threading.Event()
    app = WidgetHost()
    args = dict(baseline=100 * GIB, margin=2 * GIB, timeout=120, gpu_pids_left=None)
    async with app.run_test() as pilot:
        screen = SwitchWaitScreen("sparkdeck-old", skip)
        app.push_screen(screen, app.results.append)
        await pilot.pause()
        screen.show(switch_progress(available=49 * GIB, elapsed=3, **args))
        await pilot.pause()
        assert round(screen.query_one("#switch-bar").progress) == 50  # 49 of 98 GiB
        await pilot.press("s")
        assert not skip.is_set() and "Skip anyway" in str(screen.query_one("#skip").label)
        await pilot.press("s")
        assert skip.is_set()
        final = switch_progress(available=60 * GIB, elapsed=4, **args)
        screen.show(
            final.__class__(
                "skipped",
                *[
                    getattr(final, f)
                    for f in ("elapsed", "timeout", "target", "available", "gpu_pids_left")
                ],
            )
        )
        await pilot.pause()
        assert app.results and app.results[0].state == "skipped"
        assert app.screen is not screen


@pytest.mark.anyio
async def test_switch_wait_screen_closes_itself_when_memory_is_back():
    app = WidgetHost()
    async with app.run_test() as pilot:
        screen = SwitchWaitScreen("sparkdeck-old", threading.Event())
        app.push_screen(screen, app.results.append)
        await pilot.pause()
        screen.show(
            switch_progress(
                available=99 * GIB,
                elapsed=30,
                baseline=100 * GIB,
                margin=2 * GIB,
                timeout=120,
                gpu_pids_left=(),
            )
        )
        await pilot.pause()
        assert app.results[0].state == "memory back"


def ramp_timeline() -> StartupTimeline:
    points = tuple(
        TimelinePoint(t, TOTAL - used, used)
        for t, used in [(0.0, 10 * GIB), (1.0, 40 * GIB), (2.0, 80 * GIB), (3.0, 60 * GIB)]
    )
    marks = (
        PhaseMark(0.0, "weights loading", "x"),
        PhaseMark(2.0, "KV-cache allocation", "y"),
        PhaseMark(3.0, "ready", "z"),
    )
    return StartupTimeline(points, marks, TOTAL)


def test_chart_rows_scale_to_memtotal_and_keep_the_peak():
    rows = chart_rows(ramp_timeline(), width=4, height=2)
    # columns: 10 %, 40 %, 80 %, 60 % of the pool on 2 rows of 8 levels each
    assert rows == ["  ▅▂", "▂▆██"]
    assert phase_row(ramp_timeline(), 4) == "W KR"


@pytest.mark.anyio
async def test_timeline_chart_draws_and_lists_the_phases():
    chart = TimelineChart()
    app = WidgetHost(chart)
    async with app.run_test(size=(60, 20)) as pilot:
        assert "no start-up recorded yet" in str(chart.render())
        chart.timeline = ramp_timeline()
        await pilot.pause()
        text = str(chart.render())
        assert "█" in text and "peak 80.0 GiB of 100.0" in text
        assert "K KV-cache allocation 2.0 s" in text and "R ready 3.0 s" in text


@pytest.mark.anyio
async def test_watchdog_line_shows_each_level():
    line = WatchdogLine()
    app = WidgetHost(line)
    _, readings = recording("ramp_to_wedge")
    policy = WatchdogPolicy(GuardSettings())
    async with app.run_test() as pilot:
        assert "not running" in str(line.render())
        line.show(policy.decide(readings[:3]))
        await pilot.pause()
        assert line.has_class("-ok") and "OK" in str(line.render())
        stop = next(
            policy.decide(readings[:i])
            for i in range(2, len(readings))
            if policy.decide(readings[:i]).level == "stop"
        )
        line.show(stop)
        await pilot.pause()
        assert line.has_class("-stop") and not line.has_class("-ok")
        # the decision alone is not the stop: the line says STOPPED only once it is done
        assert "STOPPING the engine" in str(line.render())
        line.show_attempt(
            "stop failed: Docker is not answering; killed 2 processes of the "
            "container directly; retrying",
            done=False,
        )
        line.show(policy.decide(readings[:3]))  # later readings keep the stop in front
        await pilot.pause()
        assert line.has_class("-stop") and "killed 2 processes" in str(line.render())
        assert "| now OK" in str(line.render())
        line.show_attempt("stopped: Docker removed the container", done=True)
        await pilot.pause()
        assert "STOPPED the engine: stopped: Docker removed" in str(line.render())
        line.reset("watching next…")  # a new engine: the old stop leaves the line
        await pilot.pause()
        assert not line.has_class("-stop") and "watching next" in str(line.render())


class LineHost(WidgetHost):
    """A WatchdogLine in a host that keeps what the line tells the engine card."""

    def __init__(self, line: WatchdogLine) -> None:
        super().__init__(line)
        self.stopped: list[str] = []

    def on_watchdog_line_engine_stopped(self, message: WatchdogLine.EngineStopped) -> None:
        self.stopped.append(message.reasons)


@pytest.mark.anyio
async def test_the_services_stop_is_told_at_its_decision_and_relayed_past_the_containers_end():
    """CI run 37: the window saw Docker's word that the container went before the service's
    that its guard stopped it; the line stopped relaying, and the card never said why. The
    card now hears at the service's stop decision, as at this window's own, and the relay
    goes on until the service says the stop is done."""
    from sparkdeck.guard.stopper import StopAttempt
    from sparkdeck.service.guard_events import ServiceDecided, StopTried, TakenOver
    from sparkdeck.service.liveness import NOT_ANSWERING, Liveness
    from tests.support.offline_app import engine_state

    line = WatchdogLine()
    app = LineHost(line)
    why = ("MemAvailable 1.2 GiB < stop line 2.0 GiB",)
    async with app.run_test() as pilot:
        line.follow(engine_state("running"))
        assert line.watched == "c0ffee"
        line.post_message(WatchdogLine.Guarded(ServiceDecided("ok", "OK 40 GiB free", ())))
        for _ in range(3):  # the service repeats its decision every second while it stops
            line.post_message(WatchdogLine.Guarded(ServiceDecided("stop", "STOP", why)))
        await pilot.pause()
        assert app.stopped == [why[0]]  # told once, before any word of the stop itself
        line.follow(None)  # Docker: the container went; the service has not said so yet
        assert line.watched == "c0ffee", "the relay stopped before the service's word"
        done = StopAttempt(True, "stopped: Docker removed the container")
        line.post_message(WatchdogLine.Guarded(StopTried(done)))
        await pilot.pause()
        assert line.watched is None  # the stop is done: the gone engine is followed now
        assert "STOPPED the engine: stopped: Docker removed" in str(line.render())
        assert app.stopped == [why[0]]
        # a service that stops answering mid-stop sends no such word: Docker's stands
        line.follow(engine_state("running"))
        line.post_message(WatchdogLine.Guarded(ServiceDecided("stop", "STOP", why)))
        await pilot.pause()
        line.follow(None)
        assert line.watched == "c0ffee"
        gone = Liveness(NOT_ANSWERING, 4321, "process 4321 is stopped (SIGSTOP)")
        line.post_message(WatchdogLine.Guarded(TakenOver(gone)))
        await pilot.pause()
        assert line.watched is None
