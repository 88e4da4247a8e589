"""Launching from the keyboard against the real Docker daemon: the confirmation a key opens,
the presets running in a scope, and the window's size and readiness budget.
"""

from __future__ import annotations

import docker
from textual.pilot import Pilot

from sparkdeck.ui.app import SparkdeckApp
from sparkdeck.ui.screens.dialogs import ConfirmScreen
from tests.conftest import scope_containers
from tests.support.offline_app import text_of
from tests.support.pane_host import wait_until

SIZE = (120, 40)
READY_S = 90.0  # a loaded 2-core machine: llama-server is ready in < 1 s when idle


def confirm_text(app: SparkdeckApp) -> str:
    return text_of(app.screen.query_one("#confirm-steps"))


async def press_and_confirm(pilot: Pilot, app: SparkdeckApp, key: str) -> str:
    """Press `key`, wait for the confirmation, return its text (still open)."""
    await pilot.press(key)
    await wait_until(
        pilot,
        lambda: isinstance(app.screen, ConfirmScreen),
        timeout=30.0,
        what=f"the confirmation after {key}",
    )
    return text_of(app.screen.query_one("#confirm-title")) + "\n" + confirm_text(app)


def running(client: docker.DockerClient, scope: str) -> list[str]:
    return sorted(
        c.labels.get("io.sparkdeck.preset", c.name)
        for c in scope_containers(client, scope)
        if c.status == "running"
    )
