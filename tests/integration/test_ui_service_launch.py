"""A window's launch, switch and stop go through the sparkdeck service when it runs: the
service runs them (so its guard goes on after the window closes) and the window follows on
its engine card. Real Docker daemon, real llama-server image, a real service process."""

from __future__ import annotations

import threading

import pytest

from tests.conftest import scope_containers
from tests.support.cli import run_cli
from tests.support.service_env import (  # noqa: F401 - service_env is a fixture
    client_for,
    follow_service,
    service_env,
    tiny_preset,
)

pytestmark = [pytest.mark.docker, pytest.mark.llama]
READY_S = 90.0


@pytest.mark.anyio
async def test_a_window_launches_switches_and_stops_through_the_service(
    service_env, isolated_dirs, scope, docker_client, llama_image, monkeypatch
):
    from sparkdeck.catalog import load_catalog
    from sparkdeck.config.settings import Settings
    from sparkdeck.runtime import connect
    from sparkdeck.ui.app import SparkdeckApp
    from sparkdeck.ui.dashboard.launch import LaunchArea
    from sparkdeck.ui.dashboard.presets import PresetTable
    from tests.support.launch_pilot import press_and_confirm
    from tests.support.offline_app import engine_text
    from tests.support.pane_host import wait_until

    tiny_preset(isolated_dirs, llama_image, "svc-a")
    tiny_preset(isolated_dirs, llama_image, "svc-b")
    assert run_cli("service", "start", env=service_env).returncode == 0
    seen: list[tuple[str, dict]] = []
    done = threading.Event()
    follower = follow_service(service_env, seen, done)
    monkeypatch.setenv("SPARKDECK_SERVICE", "auto")
    monkeypatch.setenv("SPARKDECK_SCOPE", scope)
    app = SparkdeckApp(
        load_catalog, connect, settings=Settings(), flush=False, engine_poll_seconds=0.5
    )
    steps: list[tuple[str | None, str]] = []  # every (phase, detail) the card was given

    def card() -> str:
        return engine_text(app)

    def result_of(preset: str) -> dict | None:
        return next((d for k, d in seen if k == "launch-result" and d["preset"] == preset), None)

    async def scenario() -> None:
        async with app.run_test(size=(120, 40), notifications=True) as pilot:
            area = app.query_one(LaunchArea)
            area.watch(area, "report", lambda report: steps.append((report.phase, report.detail)))
            table = app.query_one(PresetTable)

            async def select(preset: str) -> None:
                await wait_until(pilot, lambda: preset in table.rows, what=preset)
                table.move_cursor(row=table.get_row_index(preset))
                await pilot.pause()
                assert table.selected_id() == preset

            await select("svc-a")
            await press_and_confirm(pilot, app, "l")
            await pilot.press("y")
            await wait_until(
                pilot,
                lambda: "state    ready" in card() and "svc-a" in card(),
                timeout=READY_S,
                what="svc-a ready",
            )
            # the window's launch thread follows the service's result a moment after the
            # card says ready; a switch asked for before that is refused ("already running")
            await wait_until(pilot, lambda: not area.busy(), what="svc-a's launch to finish")
            await select("svc-b")
            text = await press_and_confirm(pilot, app, "enter")
            assert text.startswith("Switch to svc-b?")
            await pilot.press("y")
            await wait_until(
                pilot,
                lambda: result_of("svc-b") is not None,
                timeout=READY_S,
                what="the service's result of the switch",
            )
            await wait_until(
                pilot,
                lambda: "state    ready" in card() and "svc-b" in card(),
                timeout=30,
                what="svc-b ready on the card",
            )

    await scenario()
    # The service ran both launches (their results are its events), and the switch's wait
    # for svc-a's memory came as the service's typed SwitchWaited events.
    first, second = result_of("svc-a"), result_of("svc-b")
    assert first is not None and first["ok"], first
    assert second is not None and second["ok"], second
    assert any(
        k == "launch-event"
        and d["event"]["type"] == "SwitchWaited"
        and d["launch"] == second["launch"]
        for k, d in seen
    )
    # The card followed the service's launch step by step as it follows a launch the window
    # runs itself: the same events reach the same card steps (the one that only a
    # ContainerStarted sets included), not lines of text the service printed.
    assert ("launching", "the sparkdeck service launches svc-b") in steps, steps
    assert {"stopping", "starting"} <= {phase for phase, _ in steps}, steps
    assert ("starting", "waiting for the health endpoint") in steps, steps
    # The window is closed; the service guards what it launched.
    with client_for(service_env) as client:
        guarding = client.status()["guard"]["guarding"]
    (container,) = [c for c in scope_containers(docker_client, scope) if c.status == "running"]
    assert container.labels["io.sparkdeck.preset"] == "svc-b" and guarding == container.name

    # A stop from a window goes through the service too.
    app = SparkdeckApp(
        load_catalog, connect, settings=Settings(), flush=False, engine_poll_seconds=0.5
    )

    async def stop_it() -> None:
        async with app.run_test(size=(120, 40), notifications=True) as pilot:
            await wait_until(
                pilot,
                lambda: "svc-b" in engine_text(app),
                timeout=30,
                what="the running engine on the card",
            )
            text = await press_and_confirm(pilot, app, "s")
            assert "stop and remove svc-b" in text
            await pilot.press("y")
            await wait_until(
                pilot,
                lambda: "state    stopped" in engine_text(app),
                timeout=60.0,
                what="the engine to stop",
            )

    try:
        await stop_it()
    finally:
        done.set()
    follower.join(timeout=10)
    assert any(
        k == "engine" and d.get("state") == "stopped" and d.get("preset_id") == "svc-b"
        for k, d in seen
    ), "the stop was not the service's"
    assert scope_containers(docker_client, scope) == []
