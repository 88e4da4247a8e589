"""The TUI side of safe launching (issue 11, items 3 and 4), on the real Docker daemon: a
launch while another process holds the launch lock is a clear notification that names it and
touches nothing; a failed launch stays on the engine card until the user dismisses it.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from sparkdeck.catalog import load_catalog
from sparkdeck.launch.failure import last_failure, record_failure
from sparkdeck.runtime.client import DockerRuntime
from sparkdeck.ui.app import SparkdeckApp
from sparkdeck.ui.dashboard.presets import PresetTable
from sparkdeck.ui.screens.dialogs import ConfirmScreen
from tests.conftest import busybox_preset, scope_containers
from tests.support.offline_app import engine_text
from tests.support.pane_host import wait_until

pytestmark = pytest.mark.docker
SIZE = (120, 40)

HOLD_LOCK = """
import sys, time
from sparkdeck.config.file_lock import FileLock
FileLock("launch", "a launch of other-preset").acquire_or_raise()
print("held", flush=True)
sys.stdin.read()  # until the test closes our stdin
"""


def make_app(tmp_path: Path, runtime: DockerRuntime) -> SparkdeckApp:
    presets = tmp_path / "presets"
    return SparkdeckApp(
        lambda: load_catalog([(presets, False)]),
        lambda: runtime,
        flush=False,
        engine_poll_seconds=0.5,
    )


def toasts(app: SparkdeckApp) -> list[str]:
    return [str(t.render()) for t in app.screen.query("Toast")]


@pytest.mark.anyio
async def test_a_launch_while_another_process_launches_is_refused_clearly(
    tmp_path, runtime, docker_client, scope, busybox_image
):
    busybox_preset(tmp_path, "web", busybox_image, "exec httpd -f -p 8080 -h /www")
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLD_LOCK],
        env=dict(os.environ),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
    app = make_app(tmp_path, runtime)

    async def scenario() -> None:
        async with app.run_test(size=SIZE, notifications=True) as pilot:
            await wait_until(
                pilot, lambda: app.query_one(PresetTable).row_count == 1, what="the preset"
            )
            await pilot.press("l")
            await wait_until(
                pilot,
                lambda: isinstance(app.screen, ConfirmScreen),
                timeout=90.0,
                what="the confirmation",
            )
            await pilot.press("y")
            await wait_until(
                pilot,
                lambda: any(t.startswith("launch failed") for t in toasts(app)),
                timeout=90.0,
                what="the refusal's notification",
            )
            refusal = next(t for t in toasts(app) if t.startswith("launch failed"))
            flat = " ".join(refusal.split())
            assert f"a launch of other-preset by process {holder.pid} is in progress" in flat
            assert "nothing was touched" in flat
            assert scope_containers(docker_client, scope) == []
            assert app.is_running

    try:
        await scenario()
    finally:
        holder.communicate(input="", timeout=30)


@pytest.mark.anyio
async def test_a_failed_launch_stays_on_the_card_until_dismissed(tmp_path, runtime, busybox_image):
    busybox_preset(tmp_path, "web", busybox_image, "exec httpd -f -p 8080 -h /www")
    # as a launch in another process (or an earlier TUI) left it after stopping an engine
    record_failure("web", "old was stopped, then web failed to start: port clash", None, [])
    app = make_app(tmp_path, runtime)

    async def scenario() -> None:
        async with app.run_test(size=SIZE, notifications=True) as pilot:
            await wait_until(
                pilot,
                lambda: "failed" in engine_text(app),
                timeout=90.0,
                what="the failure on the card",
            )
            assert "old was stopped, then web failed to start" in " ".join(engine_text(app).split())
            await pilot.pause(7.0)  # longer than a toast lives: the card still says it
            assert "web failed to start" in " ".join(engine_text(app).split())
            await pilot.press("x")
            await wait_until(
                pilot, lambda: "failed" not in engine_text(app), what="the failure dismissed"
            )
            assert last_failure() is None  # gone for `sparkdeck status` too

    await scenario()
