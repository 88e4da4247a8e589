"""The history view and the post-mortem shown once, driven through the real app with Pilot.

Real parts: recordings written by the real FlightRecorder into SQLite on disk from real
telemetry samples (this machine's /proc/meminfo and PSI through the TelemetrySampler), a real
recording process that vanishes without a clean stop (tests/integration/test_recorder.py's
child) for the post-mortem, and the real app and screens.

Fakes, labelled: GPU readings replay the H200 recording (tests/fixtures/nvml, recorded on a
real H200; no GPU here), the recorder's wall clock is a lambda where rows must sit at chosen
ages (half an hour, two hours ago), and the boot id is a lambda to simulate a reboot.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from sparkdeck.host.meminfo import gib
from sparkdeck.host.nvml import NvmlReader
from sparkdeck.recorder import FlightRecorder
from sparkdeck.recorder.query import rows_between
from sparkdeck.recorder.rows import RecordedSample
from sparkdeck.recorder.store import default_path
from sparkdeck.telemetry.sampler import TelemetrySampler
from sparkdeck.ui.app import SparkdeckApp
from sparkdeck.ui.history.bars import ScaledBars, bar_lines
from sparkdeck.ui.history.figures import read_window
from sparkdeck.ui.history.postmortem import PostMortemScreen, seen_path
from sparkdeck.ui.history.view import HistoryScreen, clock
from tests.support.offline_app import make_app, text_of
from tests.support.pane_host import wait_until
from tests.support.recording_child import child
from tests.support.telemetry import CLOCK_EVENTS as H200
from tools.record_nvml import RecordedNvml

SIZE = (120, 40)


def record(
    db: Path, ages_s: list[float], engine: str, tok_s: Callable[[int], float], now: float
) -> None:
    """Rows from real samples, stamped `age` seconds before `now`; GPU from the H200 replay
    (idle and load samples in turn, so the power varies)."""
    nvml = RecordedNvml(H200)
    steps = nvml.indices("idle") + nvml.indices("load")
    sampler = TelemetrySampler(gpu=NvmlReader(nvml, host_total_bytes=nvml.host_mem_total_bytes))
    stamp = [now]
    recorder, _ = FlightRecorder.open(db, wall=lambda: stamp[0])
    for n, age in enumerate(ages_s):
        nvml.use(steps[n % len(steps)])
        stamp[0] = now - age
        recorder.record(sampler.sample(), engine, tok_s(n))
    recorder.close()


def shown(app: SparkdeckApp, selector: str) -> str:
    return text_of(app.screen.query_one(selector))


def figures(
    rows: list[RecordedSample],
    value: Callable[[RecordedSample], float | None],
    text: Callable[[float], str],
) -> str:
    values = [v for v in map(value, rows) if v is not None]
    return f"min {text(min(values))}  max {text(max(values))}  latest {text(values[-1])}"


async def open_history(pilot, app: SparkdeckApp) -> HistoryScreen:
    await pilot.press("h")
    await wait_until(pilot, lambda: isinstance(app.screen, HistoryScreen), what="the view")
    assert isinstance(app.screen, HistoryScreen)
    return app.screen


@pytest.mark.anyio
async def test_the_view_shows_the_rows_figures_and_the_window_keys_change_them(
    tmp_path: Path,
) -> None:
    import time

    now = time.time()
    db = default_path()
    # ten readings half an hour ago (an old engine, 90+ tok/s), twelve in the last two minutes
    record(db, [1800.0 - i for i in range(10)], "old-engine running", lambda n: 90.0 + n, now)
    record(
        db, [120.0 - 5 * i for i in range(12)], "tiny-llama running", lambda n: 10.0 + n / 2, now
    )
    everything = rows_between(db, 0)
    recent = [r for r in everything if r.t >= now - 600]
    assert len(everything) == 22 and len(recent) == 12
    app, _ = make_app(tmp_path)

    async def scenario() -> None:
        async with app.run_test(size=SIZE) as pilot:
            screen = await open_history(pilot, app)
            await wait_until(
                pilot, lambda: "12 readings" in shown(app, "#history-title"), what="the 10m window"
            )
            title = shown(app, "#history-title")
            assert f"from {clock(recent[0].t)} to {clock(recent[-1].t)}" in title
            assert shown(app, "#history-mem-figures") == "MemAvailable: " + figures(
                recent, lambda r: r.mem_available, lambda v: gib(int(v))
            )
            assert shown(app, "#history-power-figures") == "GPU power: " + figures(
                recent, lambda r: r.gpu_power_w, lambda v: f"{v:.0f} W"
            )
            assert shown(app, "#history-tok-s-figures") == "tok/s: min 10.0  max 15.5  latest 15.5"
            psi = [r for r in recent if r.psi_full_pct is not None]
            if psi:  # a kernel with PSI (the test machines have it)
                assert shown(app, "#history-psi-full-figures") == "PSI full: " + figures(
                    recent, lambda r: r.psi_full_pct, lambda v: f"{v:.1f} %"
                )
            lowest = min(recent, key=lambda r: r.mem_available or 0)
            assert (
                f"worst: MemAvailable {gib(lowest.mem_available or 0)} at "
                f"{clock(lowest.t)} (tiny-llama running)"
            ) in shown(app, "#history-worst")
            # memory bars reach the top at MemTotal, not at the window's own highest value
            memory = screen.query_one("#history-mem-line", ScaledBars)
            assert memory.ceiling == max(r.mem_total or 0 for r in recent)
            assert min(v for v in memory.values if v) == min(r.mem_available or 0 for r in recent)
            line = screen.query_one("#history-tok-s-line", ScaledBars)
            assert line.display and line.ceiling == 15.5
            assert max(v for v in line.values if v) == 15.5
            # 1h: the old engine's readings join in
            await pilot.press("2")
            await wait_until(
                pilot, lambda: "22 readings" in shown(app, "#history-title"), what="the 1h window"
            )
            assert shown(app, "#history-title").startswith("history: 1h up to")
            assert shown(app, "#history-tok-s-figures") == "tok/s: min 10.0  max 99.0  latest 15.5"
            assert max(v for v in line.values if v) == 99.0 and line.ceiling == 99.0
            assert shown(app, "#history-mem-figures") == "MemAvailable: " + figures(
                everything, lambda r: r.mem_available, lambda v: gib(int(v))
            )
            await pilot.press("1")
            await wait_until(
                pilot, lambda: "12 readings" in shown(app, "#history-title"), what="back to 10m"
            )
            await pilot.press("escape")
            await wait_until(
                pilot,
                lambda: not isinstance(app.screen, HistoryScreen),
                what="Esc to close the view",
            )

    await scenario()


def test_bars_start_at_zero_and_keep_the_worst_of_each_cell() -> None:
    # 40 % and 100 % of the ceiling on one line of 8 levels; a dip inside a cell is kept
    assert bar_lines([40.0, 100.0], 2, 1, 100.0, min) == ["▃█"]
    assert bar_lines([100.0, 5.0, 100.0, 100.0], 2, 1, 100.0, min) == ["▁█"]
    assert bar_lines([100.0, 5.0, 100.0, 100.0], 2, 1, 100.0, max) == ["██"]
    # two lines: 16 levels; zero still draws the lowest bar (recorded, not missing)
    assert bar_lines([0.0, 50.0, 100.0], 3, 2, 100.0, max) == ["  █", "▁██"]
    # a slice with readings but not this figure (no engine yet) is a gap, not a stretch
    assert bar_lines([None, None, 100.0, 50.0], 4, 1, 100.0, max) == ["  █▄"]


def test_a_long_read_reports_progress_and_stops_when_cancelled(tmp_path: Path) -> None:
    import time

    now = time.time()
    db = tmp_path / "rec.sqlite"
    record(db, [3 * 86400.0, 60.0], "e", lambda n: 1.0, now)
    shares: list[float] = []
    window = read_window(db, "7d", now, progress=shares.append)
    assert window is not None and window.rows == 2
    assert shares == sorted(shares) and len(shares) == 9 and 0 < shares[0] < shares[-1] < 1
    calls = []
    assert read_window(db, "7d", now, cancelled=lambda: len(calls) > 3 or calls.append(1)) is None


@pytest.mark.anyio
async def test_a_missing_recording_and_an_empty_window_say_how_to_get_one(tmp_path: Path) -> None:
    app, _ = make_app(tmp_path)

    async def scenario() -> None:
        async with app.run_test(size=(80, 24)) as pilot:
            await open_history(pilot, app)
            await wait_until(
                pilot, lambda: app.screen.query_one("#history-hint").display, what="the hint"
            )
            hint = shown(app, "#history-hint")
            assert "no flight recording at" in hint and "sparkdeck service start" in hint
            assert not app.screen.query_one("#history-mem-figures").display
            await pilot.press("escape")
            # a recording whose rows are all two hours old: empty at 10m, shown at 6h
            import time

            record(default_path(), [7200.0, 7199.0], "old", lambda n: 1.0, time.time())
            await open_history(pilot, app)
            await wait_until(
                pilot,
                lambda: "nothing recorded" in shown(app, "#history-hint"),
                what="the empty 10m window",
            )
            assert "sparkdeck service start" in shown(app, "#history-hint")
            await pilot.press("3")
            await wait_until(
                pilot, lambda: "2 readings" in shown(app, "#history-title"), what="the 6h window"
            )
            assert not app.screen.query_one("#history-hint").display
            assert app.screen.query_one("#history-mem-figures").display

    await scenario()


@pytest.mark.anyio
async def test_the_postmortem_shows_once_and_opens_the_history_at_the_end_of_that_run(
    tmp_path: Path,
) -> None:
    db = default_path()
    db.parent.mkdir(parents=True, exist_ok=True)
    proc = child(db, "vanish")  # three real rows, then gone without a clean stop
    assert proc.wait(timeout=60) == 0
    # FAKE boot id: the service starts again "after a reboot" and writes the post-mortem
    recorder, postmortem = FlightRecorder.open(db, boot_id=lambda: "another-boot")
    recorder.close()
    assert postmortem is not None and postmortem.ended_at is not None
    rows = rows_between(db, 0)
    assert len(rows) == 3

    async def first_start() -> None:
        app, _ = make_app(tmp_path)
        async with app.run_test(size=SIZE) as pilot:
            # the dialog is the screen a moment before its text is mounted
            await wait_until(
                pilot,
                lambda: (
                    isinstance(app.screen, PostMortemScreen)
                    and bool(app.screen.query("#postmortem-text"))
                ),
                what="the post-mortem dialog",
            )
            text = shown(app, "#postmortem-text")
            assert f"verdict: {postmortem.verdict}" in text
            assert "machine restarted" in text
            assert not seen_path().exists()  # seen only once dismissed
            await pilot.press("h")
            await wait_until(
                pilot,
                lambda: isinstance(app.screen, HistoryScreen),
                what="the history at the end of that run",
            )
            assert isinstance(app.screen, HistoryScreen)
            assert app.screen.end == postmortem.ended_at
            await wait_until(
                pilot,
                lambda: "3 readings" in shown(app, "#history-title"),
                what="the run's readings",
            )
            assert f"10m before {clock(postmortem.ended_at or 0)}" in shown(app, "#history-title")
            assert "child-engine running" in shown(app, "#history-worst")
            await wait_until(pilot, seen_path().exists, what="the seen mark")

    async def second_start() -> None:
        app, _ = make_app(tmp_path)
        async with app.run_test(size=SIZE) as pilot:
            check = app.flight_history
            await wait_until(
                pilot,
                lambda: check.postmortem_check is not None and check.postmortem_check.is_finished,
                what="the check to end",
            )
            await pilot.pause(0.3)
            assert not isinstance(app.screen, PostMortemScreen)

    await first_start()
    await second_start()

    # another unclean end: its post-mortem is new, so it shows; Esc dismisses it for good
    proc = child(db, "vanish")
    assert proc.wait(timeout=60) == 0
    recorder, newer = FlightRecorder.open(db)  # same boot: a kill, not a reboot
    recorder.close()
    assert newer is not None and not newer.rebooted

    async def third_start() -> None:
        app, _ = make_app(tmp_path)
        async with app.run_test(size=(80, 24)) as pilot:
            await wait_until(
                pilot,
                lambda: (
                    isinstance(app.screen, PostMortemScreen)
                    and bool(app.screen.query("#postmortem-text"))
                ),
                what="the newer post-mortem",
            )
            assert "killed or crashed" in shown(app, "#postmortem-text")
            await pilot.pause(0.1)  # laid out: at 80x24 the whole report fits unscrolled
            assert app.screen.query_one("#postmortem-dialog").max_scroll_y == 0
            before = seen_path().read_text()
            await pilot.press("escape")
            await wait_until(
                pilot,
                lambda: seen_path().read_text() != before,
                what="the newer post-mortem marked seen",
            )
            assert not isinstance(app.screen, (PostMortemScreen, HistoryScreen))

    await third_start()
    await second_start()
