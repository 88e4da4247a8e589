"""What a person sees on the connect screen and its requests tab at 80x24.

Fixed inputs so the picture cannot depend on this machine: the endpoint's port is 9 (the
discard port: nothing listens there, so the screen says the endpoint does not answer and
takes the model names from the two preset files), no service socket, a request log written
by the real RequestLog with three FIXED rows (November 2023, shown in UTC), in a fixed data
dir under /tmp (its path is on the screen). Regenerate with `--snapshot-update` after a
deliberate change, and look at the SVGs before committing them.
"""

from __future__ import annotations

import shutil
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from textual.pilot import Pilot

from sparkdeck.catalog import load_catalog
from sparkdeck.config.settings import Settings, UiSettings
from sparkdeck.endpoint.request_log import RequestLog, RequestRecord
from sparkdeck.ui.app import SparkdeckApp
from sparkdeck.ui.dashboard.side_tabs import Sampling
from sparkdeck.ui.endpoint.view import ConnectScreen
from tests.support.offline_app import OLLAMA, TINY_LLAMA, UnreachableDocker, write_presets
from tests.support.pane_host import wait_until

DATA = Path("/tmp/sparkdeck-connect-snapshot")
WHEN = 1_700_000_000.0  # 2023-11-14 22:13:20 UTC


@pytest.fixture
def fixed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[SparkdeckApp]:
    monkeypatch.setenv("TZ", "UTC")
    time.tzset()
    shutil.rmtree(DATA, ignore_errors=True)
    monkeypatch.setenv("SPARKDECK_DATA_DIR", str(DATA))
    monkeypatch.setenv("SPARKDECK_CONFIG_DIR", str(tmp_path / "config"))
    monkeypatch.setenv("SPARKDECK_RUNTIME_DIR", str(tmp_path / "runtime"))  # no socket
    monkeypatch.setenv("SPARKDECK_ENDPOINT_PORT", "9")
    monkeypatch.delenv("SPARKDECK_API_KEY", raising=False)
    log = RequestLog()
    log.append(
        RequestRecord(
            WHEN,
            "127.0.0.1:40100",
            "/v1/chat/completions",
            "tiny:latest",
            200,
            True,
            12,
            40,
            "usage",
            0.0874,
            61.25,
            0.8,
            "ollama",
        )
    )
    log.append(
        RequestRecord(
            WHEN + 60,
            "127.0.0.1:40102",
            "/v1/chat/completions",
            "/models/tiny.gguf",
            200,
            True,
            7,
            20,
            "timings",
            1.5,
            30.0,
            2.1,
            "tiny-llama",
            waited_s=12.34,
        )
    )
    log.append(
        RequestRecord(
            WHEN + 90,
            "10.0.0.7:51234",
            "/v1/chat/completions",
            "other",
            404,
            False,
            error="model 'other' is not served",
        )
    )
    presets = write_presets(
        tmp_path / "presets", {"tiny-llama.toml": TINY_LLAMA, "ollama-test.toml": OLLAMA}
    )
    yield SparkdeckApp(
        lambda: load_catalog([(presets, False)]),
        UnreachableDocker(),
        settings=Settings(ui=UiSettings(theme="spark-dark")),
        engine_poll_seconds=3600.0,
        sampling=Sampling(seconds=3600.0, starting_seconds=3600.0),
    )
    monkeypatch.undo()
    time.tzset()
    shutil.rmtree(DATA, ignore_errors=True)


async def connect_shown(pilot: Pilot) -> None:
    app = pilot.app
    await wait_until(pilot, lambda: app.query("#preset-table"), what="the dashboard")
    await pilot.press("a")
    await wait_until(
        pilot,
        lambda: isinstance(app.screen, ConnectScreen) and len(app.screen.snippet_texts()) == 4,
        timeout=20,
        what="the snippets",
    )
    await pilot.pause(0.3)


async def requests_shown(pilot: Pilot) -> None:
    await connect_shown(pilot)
    await pilot.press("2")
    table = pilot.app.screen.query_one("#requests-table")
    await wait_until(pilot, lambda: table.row_count == 3, what="the three requests")
    await pilot.pause(0.3)


def test_connect_screen(snap_compare, fixed: SparkdeckApp) -> None:
    assert snap_compare(fixed, terminal_size=(80, 24), run_before=connect_shown)


def test_requests_tab(snap_compare, fixed: SparkdeckApp) -> None:
    assert snap_compare(fixed, terminal_size=(80, 24), run_before=requests_shown)
