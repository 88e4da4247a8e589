"""Launch, switch and stop from the keyboard, against the real Docker daemon and the real
llama-server image (tests/support/images.py). Each test has its own scope and ports.

The app is built with flush=False on purpose: dropping the page cache of a machine shared
with other test runs is not what these tests are about; the confirmation must say so.
"""

from __future__ import annotations

import re
import time
from pathlib import Path

import pytest

from sparkdeck.catalog import load_catalog
from sparkdeck.runtime.client import DockerRuntime
from sparkdeck.ui.app import SparkdeckApp
from sparkdeck.ui.dashboard.log_pane import LogPane
from sparkdeck.ui.dashboard.presets import PresetTable
from sparkdeck.ui.screens.dialogs import ConfirmScreen
from tests.conftest import free_port, llama_preset_fields, scope_containers, write_preset
from tests.support.launch_pilot import READY_S, SIZE, press_and_confirm, running
from tests.support.offline_app import engine_text
from tests.support.pane_host import wait_until

pytestmark = [pytest.mark.docker, pytest.mark.llama]


def make_app(tmp_path: Path, runtime: DockerRuntime) -> SparkdeckApp:
    # the config dir's presets: the service the window starts (it guards the running engine,
    # then runs the next launch) reads them there
    presets = tmp_path / "config" / "presets"
    return SparkdeckApp(
        lambda: load_catalog([(presets, False)]),
        lambda: runtime,
        flush=False,
        engine_poll_seconds=0.5,
    )


@pytest.mark.anyio
async def test_launch_with_confirmation_follow_logs_then_stop(
    tmp_path, runtime, docker_client, scope, llama_image
):
    write_preset(
        tmp_path / "config" / "presets", "tiny-a", **llama_preset_fields(llama_image, free_port())
    )
    claim = load_catalog([(tmp_path / "config" / "presets", False)]).get("tiny-a").memory_setting()
    app = make_app(tmp_path, runtime)

    async def scenario() -> None:
        async with app.run_test(size=SIZE, notifications=True) as pilot:
            table = app.query_one(PresetTable)
            await wait_until(pilot, lambda: table.row_count == 1, what="the preset")
            await wait_until(
                pilot,
                lambda: "state    stopped" in engine_text(app),
                what="the stopped engine",
                timeout=30.0,
            )

            text = await press_and_confirm(pilot, app, "l")
            assert text.startswith("Launch tiny-a?")
            assert "no engine is running: nothing will be stopped" in text
            # the knob is labelled a setting; the claim is the guard's figure, in GiB
            assert f"memory setting: {claim}" in text and claim.startswith("-c 2048")
            # (the GGUF is inside the image here, so the guard says it cannot size it)
            assert re.search(r"memory it will claim: (~?\d+\.\d GiB \(|unknown: )", text), text
            assert f"memory it will claim: {claim}" not in text
            assert "keep the page cache (flush turned off)" in text
            # The memory guard's verdict, from this machine's real /proc/meminfo.
            assert any(line.startswith("• fit: ") for line in text.splitlines()), text
            await pilot.press("n")  # cancelled: nothing may start
            await pilot.pause(1.0)
            assert not isinstance(app.screen, ConfirmScreen)
            assert scope_containers(docker_client, scope) == []

            await press_and_confirm(pilot, app, "l")
            await pilot.press("y")
            await wait_until(
                pilot,
                lambda: "state    ready" in engine_text(app),
                timeout=READY_S,
                what="the engine to be ready",
            )
            card = engine_text(app)
            assert "tiny-a" in card and "address  http://127.0.0.1:" in card
            assert running(docker_client, scope) == ["tiny-a"]
            log = app.query_one(LogPane)
            (container,) = scope_containers(docker_client, scope)

            def log_state() -> str:  # what to look at if the lines never come
                workers = [
                    (w.name, w.state.name, repr(w.error)) for w in app.workers if w.group == "logs"
                ]
                return (
                    f"llama-server's log in the pane: it follows {log.container_id!r} "
                    f"(the engine is {container.id!r}) and holds {list(log.lines)[-5:]!r};"
                    f" its workers {workers!r}; Docker's log: "
                    f"{container.logs(tail=5)[-300:]!r}"
                )

            await wait_until(
                pilot,
                lambda: any(
                    "llama" in line.lower() or "server" in line.lower() for line in log.lines
                ),
                timeout=30.0,
                what=log_state,
            )
            await wait_until(pilot, lambda: "uptime" in engine_text(app), what="the uptime")

            text = await press_and_confirm(pilot, app, "s")
            assert text.startswith("Stop the engine?") and "stop and remove tiny-a" in text
            await pilot.press("y")
            await wait_until(
                pilot,
                lambda: "state    stopped" in engine_text(app),
                timeout=60.0,
                what="the engine to stop",
            )
            assert scope_containers(docker_client, scope) == []
            await pilot.press("s")  # nothing to stop: said, not asked
            await pilot.pause(1.0)
            assert not isinstance(app.screen, ConfirmScreen)

    await scenario()


@pytest.mark.anyio
async def test_switch_stops_the_running_engine_first(
    tmp_path, runtime, docker_client, scope, llama_image
):
    for preset_id in ("tiny-a", "tiny-b"):
        write_preset(
            tmp_path / "config" / "presets",
            preset_id,
            **llama_preset_fields(llama_image, free_port()),
        )
    app = make_app(tmp_path, runtime)

    async def scenario() -> None:
        async with app.run_test(size=SIZE, notifications=True) as pilot:
            table = app.query_one(PresetTable)
            await wait_until(pilot, lambda: table.row_count == 2, what="two presets")
            await press_and_confirm(pilot, app, "l")
            await pilot.press("y")
            await wait_until(
                pilot,
                lambda: "state    ready" in engine_text(app) and "tiny-a" in engine_text(app),
                timeout=READY_S,
                what="tiny-a ready",
            )
            # the launch's worker ends a moment after the card says ready; a switch asked
            # for before that is refused ("already running")
            await wait_until(
                pilot, lambda: not app.launch_area.busy(), what="tiny-a's launch to finish"
            )

            await pilot.press("down")
            assert table.selected_id() == "tiny-b"
            text = await press_and_confirm(pilot, app, "enter")
            assert text.startswith("Switch to tiny-b?")
            steps = text.splitlines()
            stop_line = next(i for i, line in enumerate(steps) if line.startswith("• stop tiny-a"))
            launch_line = next(i for i, line in enumerate(steps) if "launch tiny-b" in line)
            assert stop_line < launch_line and "running" in steps[stop_line]
            await pilot.press("y")
            await wait_until(
                pilot,
                lambda: "state    ready" in engine_text(app) and "tiny-b" in engine_text(app),
                timeout=READY_S,
                what="tiny-b ready",
            )
            assert running(docker_client, scope) == ["tiny-b"]
            assert [
                c.labels.get("io.sparkdeck.preset") for c in scope_containers(docker_client, scope)
            ] == ["tiny-b"]

    await scenario()


@pytest.mark.anyio
async def test_a_failed_pull_is_a_notification_and_leaves_nothing(
    tmp_path, runtime, docker_client, scope, llama_image
):
    fields = llama_preset_fields(llama_image, free_port())
    fields["image"] = f"sparkdeck-test/absent-{scope}:v1"
    write_preset(tmp_path / "config" / "presets", "unpullable", **fields)
    app = make_app(tmp_path, runtime)

    async def scenario() -> None:
        async with app.run_test(size=SIZE, notifications=True) as pilot:
            await wait_until(
                pilot, lambda: app.query_one(PresetTable).row_count == 1, what="the preset"
            )
            await press_and_confirm(pilot, app, "l")
            await pilot.press("y")

            def toasts() -> list[str]:
                return [str(t.render()) for t in app.screen.query("Toast")]

            started = time.monotonic()
            await wait_until(
                pilot,
                lambda: any(t.startswith("launch failed") for t in toasts()),
                timeout=60.0,
                what="the failed pull's notification",
            )
            failure = next(t for t in toasts() if t.startswith("launch failed"))
            assert f"absent-{scope}" in failure
            await wait_until(
                pilot,
                lambda: "state    stopped" in engine_text(app),
                timeout=30.0,
                what="the card back to stopped",
            )
            assert time.monotonic() - started < 60.0 and app.is_running
            assert scope_containers(docker_client, scope) == []

    await scenario()
