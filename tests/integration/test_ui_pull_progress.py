"""A launch that has to pull its image shows the pull's progress on the engine card, whether
the window runs the launch itself or the sparkdeck service runs it for the window.

The real Docker daemon really pulls the image, layer bytes and all, from a registry on
loopback (tests/support/loopback_registry.py: no registry is reachable here). Before the
service relayed it, a window following the service's launch showed "waiting for sizes" for
the whole pull.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import docker.errors
import pytest

from tests.conftest import busybox_preset, unavailable
from tests.support.cli import run_cli
from tests.support.loopback_registry import LoopbackRegistry
from tests.support.service_env import service_env  # noqa: F401 - a fixture

pytestmark = pytest.mark.docker


@pytest.mark.parametrize("through_service", [False, True], ids=["window", "service"])
@pytest.mark.anyio
async def test_the_card_shows_the_pull_fraction_until_the_engine_is_ready(
    service_env, isolated_dirs, scope, docker_client, monkeypatch, through_service: bool
) -> None:
    from sparkdeck.catalog import load_catalog
    from sparkdeck.config.settings import Settings
    from sparkdeck.runtime import connect
    from sparkdeck.ui.app import SparkdeckApp
    from sparkdeck.ui.dashboard.launch import LaunchArea
    from sparkdeck.ui.dashboard.presets import PresetTable
    from tests.support.launch_pilot import press_and_confirm
    from tests.support.offline_app import engine_text
    from tests.support.pane_host import wait_until

    busybox = Path(shutil.which("busybox") or "/bin/busybox")
    if not busybox.is_file():
        unavailable("no static busybox: apt-get install busybox-static")
    monkeypatch.setenv("SPARKDECK_SCOPE", scope)
    if through_service:
        monkeypatch.setenv("SPARKDECK_SERVICE", "auto")
        assert run_cli("service", "start", env=service_env).returncode == 0
    with LoopbackRegistry(busybox) as registry:
        busybox_preset(
            isolated_dirs["config"],
            "pulled",
            registry.reference,
            "exec httpd -f -p 8080 -h /www",
            startup_timeout=60.0,
        )
        app = SparkdeckApp(
            load_catalog, connect, settings=Settings(), flush=False, engine_poll_seconds=0.5
        )
        fractions: list[float | None] = []  # the card's bar, each time the card changed

        async def scenario() -> None:
            async with app.run_test(size=(120, 40), notifications=True) as pilot:
                area = app.query_one(LaunchArea)
                area.watch(
                    area,
                    "report",
                    lambda report: (
                        fractions.append(report.pull_fraction)
                        if report.phase == "pulling"
                        else None
                    ),
                )
                table = app.query_one(PresetTable)
                await wait_until(pilot, lambda: "pulled" in table.rows, what="the preset")
                table.move_cursor(row=table.get_row_index("pulled"))
                await press_and_confirm(pilot, app, "l")
                await pilot.press("y")
                await wait_until(
                    pilot,
                    lambda: "state    ready" in engine_text(app),
                    timeout=90,
                    what="the pulled engine ready",
                )

        try:
            await scenario()
            assert docker_client.images.get(registry.reference)  # it was pulled, not found
        finally:
            try:
                docker_client.images.remove(registry.reference, force=True)
            except docker.errors.ImageNotFound:
                pass
    assert any(r.startswith("GET /v2/") and "/blobs/" in r for r in registry.requests)
    shares = [f for f in fractions if f is not None]
    assert shares, f"the card never had a pull fraction: {fractions}"
    assert any(0.0 < f < 1.0 for f in shares), shares  # the bar moved during the pull
    assert shares == sorted(shares), shares  # and never went back
    assert shares[-1] > 0.99, shares
