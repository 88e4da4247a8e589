"""Secrets never leave the environment (issue 12, item 13).

Four secrets with unique values - HF_TOKEN, a lower-case hf_token, OPENAI_API_KEY and
FOO_PASSWORD - are set in sparkdeck's environment and listed in a preset's pass_env. Then every
command a user runs is run for real: presets, launch / status / logs / stop of a busybox
engine on the real Docker daemon, chat and bench against a loopback server (which is sent the
API key, as it should be), conversations, bench history and export, and the TUI (its screen
exported as text). Not one value may appear in any stdout or stderr, in any file under the
config and data dirs, or on the screen.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import docker
import pytest
from textual.widgets import TabbedContent, TabPane

from sparkdeck.catalog import load_catalog
from sparkdeck.runtime.client import DockerRuntime
from sparkdeck.ui.app import SparkdeckApp
from tests.conftest import base_fields, free_port, remove_scope, scope_containers, write_preset
from tests.support.pane_host import wait_until
from tests.support.timed_server import running

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.docker


@pytest.fixture
def secrets(monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    # letters and digits only, so a value shows up the same in JSON, SVG and SQLite bytes
    values = {
        name: f"{tag}{uuid.uuid4().hex}"
        for name, tag in (
            ("HF_TOKEN", "hfA"),
            ("hf_token", "hfb"),
            ("OPENAI_API_KEY", "skC"),
            ("FOO_PASSWORD", "pwD"),
        )
    }
    for name, value in values.items():
        monkeypatch.setenv(name, value)
    return values


@pytest.fixture
def cli_scope(
    scope: str, docker_client: docker.DockerClient, monkeypatch: pytest.MonkeyPatch
) -> Iterator[str]:
    monkeypatch.setenv("SPARKDECK_SCOPE", scope)
    yield scope
    remove_scope(docker_client, scope)


class Outputs:
    """Runs the CLI as a user would and keeps everything it printed."""

    def __init__(self) -> None:
        self.seen: list[tuple[str, str]] = []

    def __call__(
        self, *args: str, ok: bool = True, timeout: float = 240
    ) -> subprocess.CompletedProcess[str]:
        done = subprocess.run(
            [sys.executable, "-m", "sparkdeck", *args],
            cwd=ROOT,
            text=True,
            capture_output=True,
            timeout=timeout,
            stdin=subprocess.DEVNULL,
        )
        self.seen += [
            (f"{' '.join(args)} (stdout)", done.stdout),
            (f"{' '.join(args)} (stderr)", done.stderr),
        ]
        if ok:
            assert done.returncode == 0, f"{args}: {done.stderr[-2000:]}"
        return done


def _leaks(secrets: dict[str, str], places: list[tuple[str, str | bytes]]) -> list[str]:
    found = []
    for where, text in places:
        for name, value in secrets.items():
            if (value.encode() if isinstance(text, bytes) else value) in text:
                found.append(f"{name} in {where}")
    return found


async def _tui_screen(scope: str, preset_id: str) -> str:
    app = SparkdeckApp(
        load_catalog, lambda: DockerRuntime.connect(scope=scope), engine_poll_seconds=0.5
    )
    async with app.run_test(size=(160, 50)) as pilot:
        await wait_until(
            pilot,
            lambda: preset_id in app.export_screenshot(),
            timeout=60,
            what="the running engine on the dashboard",
        )
        screens = [app.export_screenshot()]
        tabs = app.query_one(TabbedContent)
        for pane in tabs.query(TabPane):  # every side tab: machine, metrics, chat, guard...
            tabs.active = pane.id or ""
            await pilot.pause(0.5)
            screens.append(app.export_screenshot())
        await pilot.press("question_mark")  # the help screen too
        await pilot.pause(0.3)
        screens.append(app.export_screenshot())
    return "\n".join(screens)


@pytest.mark.anyio
async def test_no_secret_reaches_any_output_file_or_screen(
    secrets, cli_scope, isolated_dirs, docker_client, busybox_image, tmp_path: Path
) -> None:
    run = Outputs()
    preset_id = "secret-scan"
    write_preset(
        isolated_dirs["config"] / "presets",
        preset_id,
        title="secret scan",
        kind="openai",
        image=busybox_image,
        port=free_port(),
        **{**base_fields(), "pass_env": list(secrets)},
        openai={
            "container_port": 8080,
            "health_path": "/index.html",
            "entrypoint": ["/bin/sh", "-c", "exec httpd -f -p 8080 -h /www"],
        },
    )

    run("presets")
    run("presets", "--json")
    run(
        "presets",
        "validate",
        str(isolated_dirs["config"] / "presets" / f"{preset_id}.toml"),
        ok=False,
    )  # its exit code is its own business; what it prints is ours
    run("launch", preset_id, "--no-flush", "--timeout", "60")
    (container,) = scope_containers(docker_client, cli_scope)
    passed = container.attrs["Config"]["Env"]
    # the secrets did reach the engine (the point of pass_env), lower-case name included
    assert all(f"{name}={value}" in passed for name, value in secrets.items())
    run("status")
    run("status", "--json")
    run("logs", "--tail", "100")

    with running("usage_end", 20000.0, 400.0) as url:
        run("chat", "hello", "--save", "--endpoint", url, "--kind", "openai")
        run("chat", "hello", "--json", "--endpoint", url, "--kind", "openai")
        run(
            "bench",
            "--endpoint",
            url,
            "--kind",
            "openai",
            "--concurrency",
            "1",
            "--runs",
            "1",
            "--warmup",
            "0",
            "--prompt-tokens",
            "64",
            "--output-tokens",
            "8",
        )
        run(
            "bench",
            "--endpoint",
            url,
            "--kind",
            "openai",
            "--concurrency",
            "1",
            "--runs",
            "1",
            "--warmup",
            "0",
            "--prompt-tokens",
            "64",
            "--output-tokens",
            "8",
            "--json",
        )
    listed = json.loads(run("conversations", "--json").stdout)
    conversation_id = listed[0]["id"]
    run("conversations", "export", conversation_id)
    run("conversations", "export", conversation_id, "-o", str(isolated_dirs["data"] / "c.md"))
    run("bench", "history")
    run("bench", "export", "json", "-o", str(isolated_dirs["data"] / "bench.json"))

    screen = await _tui_screen(cli_scope, preset_id)

    def files_now(when: str) -> list[tuple[str, bytes]]:
        return [
            (f"{p} ({when})", p.read_bytes())
            for d in (isolated_dirs["config"], isolated_dirs["data"])
            for p in d.rglob("*")
            if p.is_file()
        ]

    files = files_now("engine running")  # the stop removes some (the launch record)
    run("stop", "--grace", "2")
    assert scope_containers(docker_client, cli_scope) == []
    files += files_now("after the stop")
    assert any("bench.sqlite3 " in name for name, _ in files)
    assert any(".jsonl " in name for name, _ in files)
    assert any("/launches/" in name for name, _ in files)
    places: list[tuple[str, str | bytes]] = [*run.seen, *files, ("the TUI screen", screen)]
    assert _leaks(secrets, places) == []
    assert preset_id in screen  # the screen capture did show the engine


def test_the_scan_finds_a_leak_when_there_is_one(secrets) -> None:
    """The scanner itself can fail: a value in any place, in either case of name."""
    leaked = [
        ("stdout", f"token={secrets['hf_token']}"),
        ("file", secrets["FOO_PASSWORD"].encode()),
    ]
    assert _leaks(secrets, leaked) == ["hf_token in stdout", "FOO_PASSWORD in file"]
    assert os.environ["OPENAI_API_KEY"] == secrets["OPENAI_API_KEY"]
