"""The TUI starts, as a user starts it, with a settings.toml that is not UTF-8 or is nested
too deep (issue 12, item 7): it runs on defaults and says which file it ignored, instead of
dying with a UnicodeDecodeError or RecursionError before its first frame.

`sparkdeck` runs in a detached tmux session at 100x30 with a config dir of its own, and the
screen is read back with capture-pane, the way a person would see it.
"""

from __future__ import annotations

import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from tests.support.tmux import require_tmux, tmux

ROOT = Path(__file__).parents[2]


@pytest.fixture(autouse=True)
def _tmux_installed() -> None:
    require_tmux()


@pytest.mark.parametrize(
    "content",
    [b'[ui]\ntheme = "\xff\xfe"\n', b"[ui]\ntheme = " + b"[" * 100_000 + b"]" * 100_000],
    ids=["not-utf8", "nested-too-deep"],
)
def test_the_tui_starts_on_defaults_and_names_the_settings_file(tmp_path, content):
    config, data = tmp_path / "config", tmp_path / "data"
    config.mkdir()
    data.mkdir()
    (config / "settings.toml").write_bytes(content)
    session = f"sparkdeck-{uuid.uuid4().hex[:8]}"
    env = {
        "SPARKDECK_CONFIG_DIR": str(config),
        "SPARKDECK_DATA_DIR": str(data),
        "TERM": "xterm-256color",
        "DOCKER_HOST": "unix:///nonexistent.sock",
        "PYTHONPATH": str(ROOT),
    }
    exports = " ".join(f"{k}={v}" for k, v in env.items())
    # `; sleep` keeps the pane (and a traceback in it) readable when sparkdeck dies
    tmux(
        "new-session",
        "-d",
        "-s",
        session,
        "-x",
        "100",
        "-y",
        "30",
        f"env {exports} {sys.executable} -m sparkdeck; sleep 30",
    )
    try:
        deadline, screen = time.monotonic() + 60, ""
        while time.monotonic() < deadline:
            screen = tmux("capture-pane", "-p", "-J", "-t", session)
            if "settings.toml ignored" in screen or "Traceback" in screen:
                break
            time.sleep(0.5)
        assert "Traceback" not in screen, screen
        assert "settings.toml ignored" in screen, screen
    finally:
        subprocess.run(["tmux", "kill-session", "-t", session], capture_output=True)
