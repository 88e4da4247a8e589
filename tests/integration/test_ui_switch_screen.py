"""What the screen says during a switch (issue 11, item 10): no "follow logs failed" toasts
when the old container goes, an engine card that names the engine being stopped and the one
starting (never the new state with the old engine's numbers), the skip button's full risk
text at 80x24, and the switch wait's timeout said in the TUI as the CLI says it.

Real Docker (the busybox test image, this test's own scope and ports), Pilot for the TUI.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest
from textual.app import App
from textual.widgets import Button, Static

from sparkdeck.catalog import load_catalog
from sparkdeck.config.settings import GuardSettings, Settings
from sparkdeck.guard.claims import GIB
from sparkdeck.guard.switch import switch_progress
from sparkdeck.runtime.client import DockerRuntime
from sparkdeck.runtime.errors import DockerRuntimeError
from sparkdeck.runtime.logs import LogFollower
from sparkdeck.ui.app import SparkdeckApp
from sparkdeck.ui.dashboard.engine_card import EngineCard, engine_content
from sparkdeck.ui.dashboard.presets import PresetTable
from sparkdeck.ui.guard.screens import SKIP_RISK, SwitchWaitScreen
from sparkdeck.ui.screens.dialogs import ConfirmScreen
from tests.conftest import busybox_preset
from tests.support.offline_app import engine_text
from tests.support.pane_host import WidgetHost, wait_until

# sh stays PID 1 and ends on SIGTERM (httpd as PID 1 would ignore it: a 30 s stop)
WEB = "trap 'exit 0' TERM; httpd -f -p 8080 -h /www & wait"


# ----- the log follower -------------------------------------------------------------------


@pytest.mark.docker
def test_log_follower_ends_quietly_when_the_container_goes(tmp_path, runtime, busybox_image):
    preset = busybox_preset(
        tmp_path, "chatty", busybox_image, "echo hello; while true; do echo tick; sleep 0.2; done"
    )
    # Gone before following starts: a switch removed it while the UI was about to follow.
    gone = runtime.start(preset.container_spec())
    runtime.stop(gone.container_id, grace=0)
    assert list(LogFollower(lambda: runtime, gone.container_id).batches()) == []

    # Removed while followed: the stream ends, no error.
    engine = runtime.start(preset.container_spec())
    follower = LogFollower(lambda: runtime, engine.container_id)
    lines: list[str] = []
    failures: list[BaseException] = []
    first = threading.Event()

    def follow() -> None:
        try:
            for batch in follower.batches():
                lines.extend(batch)
                first.set()
        except (DockerRuntimeError, OSError) as exc:  # what the UI would toast
            failures.append(exc)

    thread = threading.Thread(target=follow, daemon=True)
    thread.start()
    try:
        assert first.wait(30.0), "no log line arrived"
        runtime.stop(engine.container_id, grace=0)
        thread.join(30.0)
        assert not thread.is_alive(), "the follower did not end with its container"
    finally:
        follower.close()
    assert failures == [] and "hello" in lines


# ----- the switch in the real app ---------------------------------------------------------


def toasts(app: App) -> list[str]:
    return [str(t.render()) for t in app.screen.query("Toast")]


@pytest.mark.docker
@pytest.mark.in_process_owner(
    "a wait that runs to its timeout needs a margin below zero: settings.toml (the "
    "service's) refuses one"
)
@pytest.mark.anyio
async def test_switch_card_toasts_and_timeout_warning(
    tmp_path: Path, runtime: DockerRuntime, busybox_image: str
):
    old = busybox_preset(tmp_path, "sw-old", busybox_image, WEB)
    busybox_preset(tmp_path, "sw-new", busybox_image, WEB)
    old_address = f"127.0.0.1:{old.port}"
    # Memory "comes back" only 1000 GiB above where it was: the wait runs to its 2 s timeout
    # (the machine itself is left alone).
    guard = GuardSettings(switch_margin_gib=-1000.0, switch_timeout_s=2.0)
    app = SparkdeckApp(
        lambda: load_catalog([(tmp_path / "presets", False)]),
        lambda: runtime,
        settings=Settings(guard=guard),
        flush=False,
        engine_poll_seconds=0.5,
    )
    cards: list[str] = []
    every_toast: list[str] = []

    async def launch(pilot, preset_id: str) -> None:
        table = app.query_one(PresetTable)
        await wait_until(pilot, lambda: preset_id in table.rows, what=f"preset {preset_id}")
        table.move_cursor(row=table.get_row_index(preset_id))
        # The card shows "ready" from the engine poll a moment before the launch's worker
        # ends; an `l` in between is refused ("a launch or stop is already running").
        await wait_until(
            pilot,
            lambda: not app.launch_area.busy(),
            timeout=30.0,
            what="the previous launch's worker to end",
        )
        await pilot.press("l")
        await wait_until(
            pilot,
            lambda: isinstance(app.screen, ConfirmScreen),
            timeout=30.0,
            what="the confirmation",
        )
        await pilot.press("y")

    async def scenario() -> None:
        async with app.run_test(size=(120, 40), notifications=True) as pilot:
            await launch(pilot, "sw-old")
            await wait_until(
                pilot,
                lambda: (
                    "state    ready" in engine_text(app)
                    and "sw-old" in engine_text(app)
                    and "uptime" in engine_text(app)
                ),
                timeout=60.0,
                what="sw-old ready",
            )
            card = app.query_one(EngineCard)
            app.watch(
                card,
                "report",
                lambda report: cards.append(engine_content(report, time.time()).plain),
                init=False,
            )
            await launch(pilot, "sw-new")

            def seen() -> bool:
                every_toast.extend(t for t in toasts(app) if t not in every_toast)
                return (
                    "state    ready" in engine_text(app)
                    and "sw-new" in engine_text(app)
                    and any("switch wait timed out" in t for t in every_toast)
                )

            await wait_until(pilot, seen, timeout=90.0, what="sw-new ready after the timeout")
            for _ in range(6):  # a late follower failure would show within a poll or two
                await pilot.pause(0.5)
                seen()

    await scenario()
    warning = next(t for t in every_toast if "switch wait timed out" in t)
    assert "memory did not come back within 2 s" in warning, warning
    assert not any("follow logs failed" in t or "is gone" in t for t in every_toast), every_toast

    during = [
        text
        for text in cards
        if text.startswith("state    ") and not text.startswith("state    ready")
    ]
    assert any("stopping sw-old" in text for text in during), during
    assert any("next     sw-new" in text for text in during), during
    for text in during:
        state = text.splitlines()[0]
        if old_address in text:  # the old engine appears only as the one being stopped
            assert "stopping sw-old" in text or "running  sw-old" in text, text
            assert "state    starting" not in state, text
        assert not ("sw-old" in text and "uptime" in text), text


# ----- the switch-wait dialog at 80x24 ----------------------------------------------------


@pytest.mark.anyio
async def test_skip_risk_text_shows_in_full_at_80x24():
    async def scenario() -> None:
        app = WidgetHost()
        async with app.run_test(size=(80, 24)) as pilot:
            skip = threading.Event()
            screen = SwitchWaitScreen("sparkdeck-old", skip)
            await app.push_screen(screen)
            screen.show(
                switch_progress(
                    baseline=100 * GIB,
                    margin=2 * GIB,
                    available=49 * GIB,
                    elapsed=3,
                    timeout=120,
                    gpu_pids_left=None,
                )
            )
            await pilot.press("s")
            await pilot.pause()
            assert not skip.is_set()
            risk = screen.query_one("#skip-risk", Static)
            button = screen.query_one("#skip", Button)
            screen_region = app.screen.region
            for widget in (risk, button):
                assert widget.display and widget.region.width > 0
                assert screen_region.contains_region(widget.region), widget
            # every word of the risk is on screen: the wrapped lines hold the whole text
            shown = " ".join(
                line.text.strip() for line in risk.render_lines(risk.region.reset_offset)
            )
            assert " ".join(shown.split()) == " ".join(SKIP_RISK.split()), shown
            label = str(button.label)
            assert button.region.width >= len(label) + 2, (label, button.region)
            await pilot.press("s")
            assert skip.is_set()

    await scenario()
