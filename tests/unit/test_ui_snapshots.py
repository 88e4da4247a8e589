"""What a person sees: the dashboard at 120x40 with deterministic telemetry, in two themes,
and every view (no engine, a ready engine, each tab, each dialog) at 80x24, 120x40, 200x60.

Telemetry is fixed: Spark-shaped /proc text (a fake), NVML replays of the H200 recording and
of the GB10 fixture, five minutes of history built from them, one sample taken at start and
no more (sampling period of an hour). Docker answers with a fixed "unreachable" error so the
engine card does not depend on the machine. Regenerate with `--snapshot-update` after a
deliberate change, and look at the SVGs before committing them.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import replace
from pathlib import Path

import pytest
from textual.pilot import Pilot

from sparkdeck.catalog import load_catalog
from sparkdeck.config.settings import Settings, UiSettings
from sparkdeck.metrics.snapshot import EngineMetrics
from sparkdeck.ui.app import SparkdeckApp
from sparkdeck.ui.dashboard.side_tabs import Sampling
from sparkdeck.ui.readers import EngineReading
from sparkdeck.ui.screens.dialogs import ConfirmScreen
from tests.support.offline_app import OLLAMA, TINY_LLAMA, text_of, write_presets
from tests.support.pane_host import wait_until
from tests.support.snapshot_readings import HOUR, READY, no_docker
from tests.support.telemetry import (
    CLOCK_EVENTS,
    GB10,
    H200,
    replay_history,
    replay_sampler,
)

SIZE = (120, 40)


def dashboard(
    tmp_path: Path, recording: Path, sample: int, theme: str, rails: bool
) -> SparkdeckApp:
    presets = write_presets(
        tmp_path / "presets", {"tiny-llama.toml": TINY_LLAMA, "ollama-test.toml": OLLAMA}
    )
    return SparkdeckApp(
        lambda: load_catalog([(presets, False)]),
        no_docker,
        settings=Settings(ui=UiSettings(theme=theme)),
        sampling=Sampling(
            replay_sampler(recording, sample, rails=rails), replay_history(recording), HOUR, HOUR
        ),
        engine_poll_seconds=HOUR,
    )


async def settled(pilot: Pilot) -> None:
    app = pilot.app
    await wait_until(
        pilot, lambda: app.query_one("#preset-table").row_count == 2, what="the presets"
    )
    table = app.query_one("#preset-table")
    await wait_until(
        pilot,
        lambda: not any("…" in table.get_row_at(r) for r in range(2)),
        what="the models' sizes on disk (a worker fills them in)",
    )
    await wait_until(
        pilot,
        lambda: "snapshot test" in text_of(app.query_one("#environment-panel")),
        what="Docker's answer",
    )
    await wait_until(
        pilot,
        lambda: "reading" not in text_of(app.query_one("#gpu-rows")),
        what="the telemetry sample",
    )
    # The preset table sizes its columns on idle after its rows arrive; a shot taken before
    # that shows cut columns (seen once in CI). Let the idle pass and any refresh run first.
    await pilot.wait_for_scheduled_animations()
    await pilot.pause(0.3)
    await pilot.pause()


@pytest.mark.parametrize(
    ("recording", "sample", "theme", "rails"),
    [
        (H200, 15, "spark-dark", False),
        (GB10, 1, "spark-light", True),
    ],
    ids=["h200-load-spark-dark", "gb10-rails-spark-light"],
)
def test_dashboard(
    snap_compare, tmp_path: Path, recording: Path, sample: int, theme: str, rails: bool
) -> None:
    app = dashboard(tmp_path, recording, sample, theme, rails)
    assert snap_compare(app, terminal_size=SIZE, run_before=settled)


# ----- the layout at 80x24, 120x40 and 200x60 ------------------------------------------------
# Each view at each size, named `test_layout[<size>-<view>]`. Readings are fixed: the H200
# replay under load (power capped), the Spark-shaped /proc text, and for the ready engine a
# fixed Docker reading (an EngineState written here, started_at unset so no uptime), log
# lines and an engine-metrics trail handed to the panes the way their workers hand them.

SIZES = {"80x24": (80, 24), "120x40": (120, 40), "200x60": (200, 60)}
LOG = [
    "main: loading model",
    "llama_model_loader: loaded meta data with 24 key-value pairs "
    "and 21 tensors from /models/tiny.gguf (version GGUF V3 (latest))",
    "main: model loaded",
    "main: server is listening on http://0.0.0.0:8080 - starting the main loop",
    "srv  update_slots: all slots are idle",
]
TRAIL = tuple(
    EngineMetrics(
        "llamacpp",
        "ok",
        1_800_000_000.0 + t,
        generation_tps=tps,
        generation_tps_avg=640.0,
        prompt_tps=2100.0,
        stream_tps=tps / 2,
        running=2.0,
        waiting=1.0,
        kv_usage=0.31,
    )
    for t, tps in enumerate((0.0, 180.0, 420.0, 655.0, 702.5, 698.0, 711.3))
)


def layout_app(tmp_path: Path) -> SparkdeckApp:
    return dashboard(tmp_path, CLOCK_EVENTS, 12, "spark-dark", False)


async def with_ready_engine(pilot: Pilot) -> None:
    app = pilot.app
    await settled(pilot)
    app.launch_area.log_pane._runtime = None  # lines come from LOG, not from Docker
    app.environment = replace(app.environment, docker_reachable=True, docker_error=None)
    app.docker = EngineReading(READY, healthy=True)
    app.launch_area.log_pane.add_lines(READY.container_id, LOG)
    app.side_tabs.strip.metrics(TRAIL)
    app.metrics_tab.trail = TRAIL
    await pilot.pause(0.3)


def view(
    setup: Callable[[Pilot], Awaitable[None]],
    then: Callable[[Pilot], Awaitable[None]] | None = None,
):
    async def run_before(pilot: Pilot) -> None:
        await setup(pilot)
        if then is not None:
            await then(pilot)
        await pilot.wait_for_scheduled_animations()
        await pilot.pause(0.3)

    return run_before


def press(*keys: str) -> Callable[[Pilot], Awaitable[None]]:
    async def pressing(pilot: Pilot) -> None:
        await pilot.press(*keys)
        await pilot.pause(0.3)

    return pressing


async def confirm(pilot: Pilot) -> None:
    pilot.app.push_screen(
        ConfirmScreen(
            "Switch to tiny-llama?",
            [
                "stop sparkdeck-ollama-test (Ollama) and wait for its memory to come back",
                "flush the page cache (sudo -n allowed)",
                "start local/llama-server:test, claiming ~1.2 GiB of 121.7 GiB (fits: 40.0 GiB "
                "available)",
            ],
            yes_label="Switch",
        )
    )
    await pilot.pause(0.3)


VIEWS = {
    "no-engine": view(settled),
    "ready-engine": view(with_ready_engine),
    "ready-engine-metrics-tab": view(with_ready_engine, press("e")),
    "metrics-tab": view(settled, press("e")),
    "chat-tab": view(settled, press("c")),
    "guard-tab": view(settled, press("g")),
    "help-dialog": view(settled, press("question_mark")),
    "confirm-dialog": view(settled, confirm),
}


@pytest.mark.parametrize("name", list(VIEWS))
@pytest.mark.parametrize("size", list(SIZES))
def test_layout(snap_compare, tmp_path: Path, size: str, name: str) -> None:
    assert snap_compare(layout_app(tmp_path), terminal_size=SIZES[size], run_before=VIEWS[name])
