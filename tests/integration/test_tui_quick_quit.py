"""`q` pressed the moment `sparkdeck` starts quits it cleanly.

`sparkdeck` mounts its side tabs right after the first frame (sparkdeck/ui/screen_layout.py).
A key typed before that frame is read with the first input and handled before the deferred
mount: with Textual's own `Lazy` the mount then went into a screen that was already gone, and
the app died with a MountError traceback and exit status 1. The real command runs in a
detached tmux session, as a user starts it, and `q` is sent as soon as the session exists.
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


@pytest.mark.parametrize("attempt", range(3))
def test_q_at_start_quits_with_status_0_and_no_traceback(tmp_path: Path, attempt: int) -> None:
    config, data = tmp_path / "config", tmp_path / "data"
    config.mkdir()
    data.mkdir()
    status, errors = tmp_path / "status", tmp_path / "stderr"
    session = f"sparkdeck-{uuid.uuid4().hex[:8]}"
    env = {
        "SPARKDECK_CONFIG_DIR": str(config),
        "SPARKDECK_DATA_DIR": str(data),
        "SPARKDECK_RUNTIME_DIR": str(tmp_path / "run"),
        "TERM": "xterm-256color",
        "DOCKER_HOST": "unix:///nonexistent.sock",
        "PYTHONPATH": str(ROOT),
    }
    exports = " ".join(f"{k}={v}" for k, v in env.items())
    # Textual draws on stderr, and a crash's traceback lands there too
    tmux(
        "new-session",
        "-d",
        "-s",
        session,
        "-x",
        "120",
        "-y",
        "40",
        f"env {exports} {sys.executable} -m sparkdeck 2>{errors}; echo $? >{status}; sleep 30",
    )
    try:
        tmux("send-keys", "-t", session, "q")
        deadline = time.monotonic() + 60
        while not status.exists() or not status.read_text().strip():
            assert time.monotonic() < deadline, tmux("capture-pane", "-p", "-t", session)
            time.sleep(0.1)
        drawn = errors.read_text(errors="replace")
        assert "Traceback" not in drawn and "MountError" not in drawn, drawn[-3000:]
        assert status.read_text().strip() == "0"
    finally:
        subprocess.run(["tmux", "kill-session", "-t", session], capture_output=True)
