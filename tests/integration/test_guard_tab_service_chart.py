"""The guard tab draws the start-up of launches the sparkdeck service ran (issue 27, item 7).

A launch the service runs reaches a window as event-stream lines, never as the in-process
TimelineSaved event the chart was fed from, so the guard tab said "no start-up recorded yet"
though the launch's record (launches/<container id>.json) held its timeline. The chart now
reads the newest record. Real Docker daemon, real llama-server image, a real service process:
a launch asked for by the window, then one asked for by the CLI while the guard tab is open.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from tests.conftest import scope_containers
from tests.support.cli import run_cli
from tests.support.service_env import service_env, tiny_preset  # noqa: F401 - a fixture

pytestmark = [pytest.mark.docker, pytest.mark.llama]
READY_S = 90.0


def _record_of(data_dir: Path, container_id: str) -> dict:
    record = json.loads((data_dir / "launches" / f"{container_id}.json").read_text())
    assert record["timeline"]["points"], record  # the service saved a real timeline
    return record


def _figures(record: dict) -> str:
    """The chart's figures line for the record's timeline, computed here from the file."""
    timeline = record["timeline"]
    peak = max(used for _, _, used in timeline["points"])
    return f"peak {peak / 2**30:.1f} GiB of {timeline['total'] / 2**30:.1f}"


@pytest.mark.anyio
async def test_the_guard_tab_draws_the_start_up_of_launches_the_service_ran(
    service_env, isolated_dirs, scope, docker_client, llama_image, monkeypatch
):
    from sparkdeck.catalog import load_catalog
    from sparkdeck.config.settings import Settings
    from sparkdeck.runtime import connect
    from sparkdeck.ui.app import SparkdeckApp
    from sparkdeck.ui.dashboard.launch import LaunchArea
    from sparkdeck.ui.dashboard.presets import PresetTable
    from sparkdeck.ui.guard.timeline import BLOCKS, TimelineChart
    from tests.support.launch_pilot import press_and_confirm
    from tests.support.offline_app import engine_text
    from tests.support.pane_host import wait_until

    tiny_preset(isolated_dirs, llama_image, "svc-a")
    tiny_preset(isolated_dirs, llama_image, "svc-b")
    assert run_cli("service", "start", env=service_env).returncode == 0
    monkeypatch.setenv("SPARKDECK_SERVICE", "auto")
    monkeypatch.setenv("SPARKDECK_SCOPE", scope)
    app = SparkdeckApp(
        load_catalog, connect, settings=Settings(), flush=False, engine_poll_seconds=0.5
    )
    data = isolated_dirs["data"]
    steps: list[str] = []

    def running() -> list:
        return [c for c in scope_containers(docker_client, scope) if c.status == "running"]

    async def scenario() -> None:
        async with app.run_test(size=(120, 40), notifications=True) as pilot:
            area = app.query_one(LaunchArea)
            area.watch(area, "report", lambda report: steps.append(report.detail))
            table = app.query_one(PresetTable)
            await wait_until(pilot, lambda: "svc-a" in table.rows, what="svc-a")
            table.move_cursor(row=table.get_row_index("svc-a"))
            await pilot.pause()

            # 1. The window asks; the service runs the launch.
            await press_and_confirm(pilot, app, "l")
            await pilot.press("y")
            await wait_until(
                pilot,
                lambda: "state    ready" in engine_text(app) and "svc-a" in engine_text(app),
                timeout=READY_S,
                what="svc-a ready",
            )
            await wait_until(pilot, lambda: not area.busy(), what="svc-a's launch to finish")
            assert "the sparkdeck service launches svc-a" in steps, steps
            (container,) = running()
            record = _record_of(data, container.id)
            assert record["preset_id"] == "svc-a"

            await pilot.press("g")
            chart = app.query_one(TimelineChart)
            await wait_until(
                pilot,
                lambda: "svc-a" in str(chart.render()),
                timeout=10,
                what=lambda: f"svc-a's chart, not {str(chart.render())!r}",
            )
            text = str(chart.render())
            print(text)
            assert text.splitlines()[0].startswith(f"svc-a ({container.name}), saved ")
            assert _figures(record) in text
            assert any(block in text for block in BLOCKS[1:])  # the bars are drawn

            # 2. The CLI asks the service for another launch while the guard tab is open:
            # the chart follows within a look or two of its record being saved.
            switched = await asyncio.to_thread(
                run_cli,
                "launch",
                "svc-b",
                "--yes",
                "--no-flush",
                "--timeout",
                "60",
                env=service_env,
                timeout=READY_S + 60,
            )
            assert switched.returncode == 0, switched.stderr
            assert "sparkdeck service" in switched.stdout, switched.stdout
            (container,) = running()
            record = _record_of(data, container.id)
            assert record["preset_id"] == "svc-b"
            await wait_until(
                pilot,
                lambda: "svc-b" in str(chart.render()),
                timeout=10,  # the chart looks every 2 s while shown
                what=lambda: f"svc-b's chart, not {str(chart.render())!r}",
            )
            text = str(chart.render())
            print(text)
            assert text.splitlines()[0].startswith(f"svc-b ({container.name}), saved ")
            assert _figures(record) in text and "svc-a" not in text

    await scenario()
