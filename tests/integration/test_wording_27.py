"""Wording and small errors (issue 27, item 8), each as a user meets it: real commands in a
subprocess, the real TUI screens under Pilot, the real service owner and Docker.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest
from textual.app import App
from textual.widgets import ProgressBar, Static

from sparkdeck.config.settings import GuardSettings
from sparkdeck.recorder import FlightRecorder
from sparkdeck.recorder.store import default_path
from sparkdeck.service.hub import EventHub
from sparkdeck.service.owner import EngineOwner
from sparkdeck.ui.history.postmortem import PostMortemScreen
from sparkdeck.ui.models.view import ModelsScreen
from tests.conftest import base_fields, free_port, write_preset
from tests.support.offline_app import make_app
from tests.support.pane_host import wait_until
from tests.support.recording_child import child

README = Path(__file__).resolve().parents[2] / "README.md"


def sparkdeck(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "sparkdeck", *args],
        capture_output=True,
        text=True,
        timeout=120,
        stdin=subprocess.DEVNULL,
        env=env or dict(os.environ),
    )


def test_no_runtime_dir_warning_without_xdg_runtime_dir_and_exit_codes_listed() -> None:
    env = {
        k: v for k, v in os.environ.items() if k not in ("XDG_RUNTIME_DIR", "SPARKDECK_RUNTIME_DIR")
    }  # ssh, sudo, cron
    env["SPARKDECK_SERVICE"] = "auto"
    done = sparkdeck("service", "status", env=env)
    assert "RuntimeDirWarning" not in done.stderr and "XDG_RUNTIME_DIR" not in done.stderr
    assert done.returncode == 3, done.stdout + done.stderr  # not running
    readme = README.read_text()
    assert len(readme.encode()) <= 12288
    line = re.search(r"Exit codes:[^\n]*\n[^\n]*", readme)
    assert line and "3 not running" in line.group() and "4 not answering" in line.group()


def test_models_plan_names_the_key_it_reads(isolated_dirs) -> None:
    write_preset(
        isolated_dirs["config"] / "presets",
        "ctx-engine",
        title="t",
        kind="llamacpp",
        image="img",
        model="/models/x.gguf",
        llamacpp={"context": 2048},
    )
    done = sparkdeck("models", "plan", "ctx-engine")
    assert done.returncode == 0, done.stderr
    flat = " ".join(done.stdout.split())
    assert "the top-level `context` nor `kv_budget_gib`" in flat
    assert "`llamacpp.context` = 2048 sets only the engine's own context" in flat


def test_telemetry_prints_the_available_share_once() -> None:
    done = sparkdeck("telemetry", "--samples", "1")
    assert done.returncode == 0, done.stderr
    (available,) = [
        line for line in done.stdout.splitlines() if line.strip().startswith("available")
    ]
    assert available.count("%") == 1, available


def test_models_pull_offline_says_the_hub_cannot_be_reached() -> None:
    env = {
        **os.environ,
        "HF_ENDPOINT": f"http://127.0.0.1:{free_port()}",  # nobody there
        "HF_HUB_DISABLE_XET": "1",
    }
    env.pop("HF_TOKEN", None)
    done = sparkdeck("models", "pull", "org/some-model", env=env)
    assert done.returncode == 1
    assert "the Hugging Face Hub" in done.stderr and "cannot be reached" in done.stderr
    assert "HF_ENDPOINT" in done.stderr  # what to do


@pytest.mark.anyio
async def test_models_view_points_at_the_box_and_hides_an_idle_bar(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "empty-hub"))

    async def scenario() -> None:
        async with App[None]().run_test(size=(80, 24)) as pilot:
            screen = ModelsScreen({})
            await pilot.app.push_screen(screen)
            status = screen.query_one("#models-pull-status", Static)
            await wait_until(pilot, lambda: "no models" in str(status.render()))
            text = str(status.render())
            assert "below" not in text and "model repo to pull" in text
            assert not screen.query_one(ProgressBar).display  # no idle "--%"

    await scenario()


@pytest.mark.anyio
async def test_q_on_the_postmortem_dialog_quits(tmp_path: Path) -> None:
    db = default_path()
    db.parent.mkdir(parents=True, exist_ok=True)
    proc = child(db, "vanish")  # real rows, then gone without a clean stop
    assert proc.wait(timeout=60) == 0
    recorder, postmortem = FlightRecorder.open(db)
    recorder.close()
    assert postmortem is not None
    app, _ = make_app(tmp_path)

    async def scenario() -> None:
        async with app.run_test(size=(80, 24)) as pilot:
            await wait_until(
                pilot,
                lambda: (
                    isinstance(app.screen, PostMortemScreen)
                    and bool(app.screen.query("#postmortem-text"))
                ),
                what="the post-mortem dialog",
            )
            await pilot.press("q")
            await wait_until(
                pilot, lambda: app.return_code is not None, what="the app to quit on the first q"
            )

    await scenario()
    assert app.return_code is not None


@pytest.mark.docker
def test_a_failed_launch_is_named_as_failed_in_the_flight_record(
    tmp_path, runtime, busybox_image, isolated_dirs
) -> None:
    write_preset(
        isolated_dirs["config"] / "presets",
        "dies",
        title="dies",
        kind="openai",
        image=busybox_image,
        port=free_port(),
        startup_timeout=30.0,
        **base_fields(),
        openai={"container_port": 8080, "entrypoint": ["/bin/sh", "-c", "exit 3"]},
    )
    owner = EngineOwner(EventHub(), GuardSettings(), lambda: runtime)
    owner.launch("dies", flush=False, skip_switch_wait=True)
    assert owner.engine_text() == "a launch of dies"  # while it runs
    deadline = time.monotonic() + 60
    while owner.in_flight is not None and time.monotonic() < deadline:
        time.sleep(0.1)
    assert owner.engine_text() == "dies launch failed"
