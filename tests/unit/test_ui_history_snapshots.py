"""What a person sees in the history view, at 80x24 and 120x40, from a fixed recording.

The recording is written by the real FlightRecorder, but its rows are fixed (FAKE values,
labelled: the same readings at the same time stamps on every run, so the picture cannot
depend on this machine): ten minutes at 1 Hz of a Spark-sized machine where an engine starts,
memory dips to 3 GiB with PSI rising around minute seven, the GPU draws power while the engine
serves, and tok/s follows. Time is shown in UTC. Regenerate with `--snapshot-update` after a
deliberate change, and look at the SVGs before committing them.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from textual.pilot import Pilot

from sparkdeck.config.settings import Settings, UiSettings
from sparkdeck.recorder import FlightRecorder
from sparkdeck.recorder.rows import RecordedSample
from sparkdeck.ui.app import SparkdeckApp
from sparkdeck.ui.dashboard.side_tabs import Sampling
from sparkdeck.ui.history.view import HistoryScreen
from tests.support.offline_app import UnreachableDocker, text_of, write_presets
from tests.support.pane_host import wait_until

END = 1_800_000_000.0  # 2027-01-15 08:00:00 UTC
GIB = 2**30
TOTAL = 128 * GIB


def fixed_row(second: int) -> RecordedSample:
    """One reading, `second` seconds into the ten minutes."""
    starting = 120 <= second < 300
    serving = second >= 300
    dip = max(0.0, 1.0 - abs(second - 420) / 40.0)  # worst at 420 s, gone 40 s either side
    available = TOTAL - (20 * GIB if starting else 0) - (90 * GIB if serving else 0)
    available = int(available - dip * 35 * GIB) if serving else available
    return RecordedSample(
        t=END - 600 + second,
        mem_total=TOTAL,
        mem_available=available,
        mem_free=available // 2,
        cached=available // 4,
        swap_total=0,
        swap_free=0,
        psi_some_avg10=round(30.0 * dip, 2),
        psi_full_avg10=round(12.0 * dip, 2),
        psi_full_rate=round(18.0 * dip, 2),
        gpu_power_w=(35.0 if not serving else 60.0 + (second % 30)),
        gpu_sm_mhz=1500,
        engine_state=("vllm-ngc starting" if starting else "vllm-ngc running" if serving else None),
        tok_s=(40.0 + (second % 45) if serving else None),
    )


@pytest.fixture
def utc(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setenv("TZ", "UTC")
    time.tzset()
    yield
    monkeypatch.undo()
    time.tzset()


def recording(tmp_path: Path) -> Path:
    db = tmp_path / "fixed.sqlite"
    recorder, _ = FlightRecorder.open(db, wall=lambda: END)
    for second in range(600):
        recorder.add(fixed_row(second))
    recorder.close()
    return db


def app_with(tmp_path: Path, db: Path) -> SparkdeckApp:
    presets = write_presets(tmp_path / "presets", {})
    from sparkdeck.catalog import load_catalog

    app = SparkdeckApp(
        lambda: load_catalog([(presets, False)]),
        UnreachableDocker(),
        settings=Settings(ui=UiSettings(theme="spark-dark")),
        engine_poll_seconds=3600.0,
        sampling=Sampling(seconds=3600.0, starting_seconds=3600.0),
    )
    app.flight_history.recording_path = db
    return app


async def history_shown(pilot: Pilot) -> None:
    app = pilot.app
    assert isinstance(app, SparkdeckApp)
    await wait_until(pilot, lambda: app.query("#preset-table"), what="the dashboard")
    await pilot.pause()
    await app.push_screen(HistoryScreen(app.flight_history.recording(), end=END))
    await wait_until(
        pilot,
        lambda: (
            isinstance(app.screen, HistoryScreen)
            and "readings" in text_of(app.screen.query_one("#history-title"))
        ),
        what="the fixed window",
    )
    await pilot.pause(0.3)


@pytest.mark.parametrize("size", [(80, 24), (120, 40)], ids=["80x24", "120x40"])
def test_history_view(snap_compare, tmp_path: Path, utc: None, size: tuple[int, int]) -> None:
    app = app_with(tmp_path, recording(tmp_path))
    assert snap_compare(app, terminal_size=size, run_before=history_shown)
