"""A stop that waits out its grace period says so while it waits (issue 27, item 6), against
a real busybox engine whose PID 1 ignores SIGTERM: `sparkdeck stop` prints the countdown and
what ended it (SIGKILL), and the TUI's engine card counts down the same way.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from collections.abc import Iterator

import pytest

from sparkdeck.catalog import load_catalog
from sparkdeck.launch.sequence import Launcher
from sparkdeck.runtime.client import DockerRuntime
from sparkdeck.ui.app import SparkdeckApp
from sparkdeck.ui.screens.dialogs import ConfirmScreen
from tests.conftest import (
    base_fields,
    busybox_preset,
    free_port,
    remove_scope,
    scope_containers,
    write_preset,
)
from tests.support.offline_app import engine_text
from tests.support.pane_host import wait_until

pytestmark = pytest.mark.docker
# sh as PID 1 ignoring SIGTERM, serving the health page: only SIGKILL ends it
IGNORES_TERM = "trap '' TERM; httpd -p 8080 -h /www; while true; do sleep 1; done"


def skip_wait() -> threading.Event:
    skip = threading.Event()
    skip.set()
    return skip


@pytest.fixture
def cli_env(isolated_dirs, scope, docker_client) -> Iterator[dict[str, str]]:
    yield {**os.environ, "SPARKDECK_SCOPE": scope}
    remove_scope(docker_client, scope)


@pytest.mark.parametrize("service", ["off", "auto"], ids=["in-process", "through-service"])
def test_sparkdeck_stop_counts_down_to_sigkill(cli_env, isolated_dirs, busybox_image, service):
    """The same lines whoever stops it: with the service, its stop's steps come back as
    typed events and `--grace` is the service's grace too (it used to stop with its own 30 s
    and say nothing until then)."""
    cli_env = {**cli_env, "SPARKDECK_SERVICE": service}
    try:
        counts_down(cli_env, isolated_dirs, busybox_image, service == "auto")
    finally:
        if service == "auto":
            subprocess.run(
                [sys.executable, "-m", "sparkdeck", "service", "stop"],
                env=cli_env,
                capture_output=True,
                timeout=60,
                stdin=subprocess.DEVNULL,
            )


def counts_down(
    cli_env: dict[str, str], isolated_dirs, busybox_image: str, by_service: bool
) -> None:
    write_preset(
        isolated_dirs["config"] / "presets",
        "stubborn",
        title="stubborn",
        kind="openai",
        image=busybox_image,
        port=free_port(),
        startup_timeout=60.0,
        **base_fields(),
        openai={
            "container_port": 8080,
            "health_path": "/index.html",
            "entrypoint": ["/bin/sh", "-c", IGNORES_TERM],
        },
    )
    launched = subprocess.run(
        [
            sys.executable,
            "-m",
            "sparkdeck",
            "launch",
            "stubborn",
            "--yes",
            "--no-flush",
            "--no-switch-wait",
        ],
        capture_output=True,
        text=True,
        env=cli_env,
        timeout=120,
        stdin=subprocess.DEVNULL,
    )
    assert launched.returncode == 0, launched.stdout + launched.stderr
    stopped = subprocess.run(
        [sys.executable, "-m", "sparkdeck", "stop", "--grace", "7"],
        capture_output=True,
        text=True,
        env=cli_env,
        timeout=60,
        stdin=subprocess.DEVNULL,
    )
    assert stopped.returncode == 0, stopped.stderr
    lines = stopped.stdout.splitlines()
    assert lines[0] == (
        "stopping stubborn: SIGTERM sent; it has 7 s to exit, then Docker kills it (SIGKILL)"
    ), lines
    # not a log, so a line every 5 s (a terminal gets one line rewritten each second)
    assert "  SIGTERM sent 5 s ago; SIGKILL in 2 s unless it exits first" in lines, lines
    assert any(
        line.startswith(
            "  stubborn did not exit within 7 s of SIGTERM: Docker killed it (SIGKILL) after "
        )
        for line in lines
    ), lines
    removed = [line for line in lines if line.startswith("stopped and removed")]
    assert len(removed) == 1 and removed[0].endswith(" (by the service)") == by_service, lines


@pytest.mark.anyio
async def test_the_engine_card_counts_down_the_grace(
    runtime: DockerRuntime, docker_client, scope, tmp_path, busybox_image
):
    preset = busybox_preset(tmp_path, "stubborn", busybox_image, IGNORES_TERM)
    Launcher(runtime, stop_grace=5).launch(preset, flush=False, skip_switch_wait=skip_wait())
    (container,) = scope_containers(docker_client, scope)
    app = SparkdeckApp(
        lambda: load_catalog([(tmp_path / "presets", False)]),
        lambda: runtime,
        flush=False,
        engine_poll_seconds=0.5,
    )

    async def scenario() -> None:
        async with app.run_test(size=(120, 40)) as pilot:
            await wait_until(
                pilot, lambda: "uptime" in engine_text(app), timeout=60.0, what="the running engine"
            )
            await pilot.press("s")
            await wait_until(
                pilot,
                lambda: isinstance(app.screen, ConfirmScreen),
                timeout=60.0,
                what="the stop's confirmation",
            )
            await pilot.press("y")
            await wait_until(
                pilot,
                lambda: "SIGKILL in" in engine_text(app),
                timeout=20.0,
                what="the countdown on the card",
            )
            first = " ".join(engine_text(app).split())
            await wait_until(
                pilot,
                lambda: (
                    " ".join(engine_text(app).split()) != first and "SIGKILL in" in engine_text(app)
                ),
                timeout=5.0,
                what="the countdown moving on",
            )
            container.kill()  # end the 30 s wait here: the card then says how it ended
            await wait_until(
                pilot,
                lambda: "SIGKILL in" not in engine_text(app),
                timeout=30.0,
                what="the stop's end",
            )

    await scenario()
