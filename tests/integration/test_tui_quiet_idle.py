"""The idle TUI, run as a user runs it (tmux, a real terminal), wakes only for its data
(issue 14's idle-CPU target): its input thread sleeps while nobody types, yet a key after a
quiet spell, a lone Esc and `q` still act at once; and its engine watch does not ask Docker
every 2 s while nothing changes.

Stock Textual's input thread wakes ten times a second (30 times in the 3 s watched here), and
the engine poll used to run a new worker every 2 s: both are counted from /proc, per thread.
"""

from __future__ import annotations

import os
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


def _switches(pid: int) -> dict[int, int]:
    """Each thread's wake-ups (voluntary context switches: sleeps that ended), by thread id
    (Python does not name its threads for the kernel: they are told apart by how often
    they wake). Preemption by a busy machine is not counted."""
    counts: dict[int, int] = {}
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            status = (task / "status").read_text().splitlines()
        except FileNotFoundError:  # a worker thread that just ended
            continue
        counts[int(task.name)] = sum(
            int(line.split()[1]) for line in status if line.startswith("voluntary_ctxt_switches")
        )
    return counts


def _child(parent: int) -> int:
    """The process `parent` (the pane's shell) started, read from /proc."""
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except (FileNotFoundError, ProcessLookupError):
            continue
        if int(fields[1]) == parent:
            return int(stat.parent.name)
    raise AssertionError(f"process {parent} has no child")


def _wait_for(
    session: str, present: str | None = None, absent: str | None = None, timeout: float = 10.0
) -> tuple[float, str]:
    began = time.monotonic()
    while True:
        screen = tmux("capture-pane", "-p", "-J", "-t", session)
        if (present is None or present in screen) and (absent is None or absent not in screen):
            return time.monotonic() - began, screen
        if time.monotonic() - began > timeout:
            raise AssertionError(f"waited {timeout} s for {present or absent!r}:\n{screen}")
        time.sleep(0.02)


def test_the_idle_tui_sleeps_and_still_answers_keys_at_once(tmp_path):
    config, data = tmp_path / "config", tmp_path / "data"
    config.mkdir()
    data.mkdir()
    session = f"sparkdeck-{uuid.uuid4().hex[:8]}"
    env = {
        "SPARKDECK_CONFIG_DIR": str(config),
        "SPARKDECK_DATA_DIR": str(data),
        "SPARKDECK_RUNTIME_DIR": str(tmp_path / "run"),
        "SPARKDECK_SERVICE": "off",
        "TERM": "xterm-256color",
        "PYTHONPATH": str(ROOT),
        "DOCKER_HOST": os.environ.get("DOCKER_HOST", "unix:///nonexistent.sock"),
    }
    exports = " ".join(f"{k}={v}" for k, v in env.items())
    tmux(
        "new-session",
        "-d",
        "-s",
        session,
        "-x",
        "120",
        "-y",
        "40",
        f"env {exports} {sys.executable} -m sparkdeck; echo SPARKDECK-EXITED; sleep 30",
    )
    try:
        shell = int(tmux("display-message", "-p", "-t", session, "#{pane_pid}").strip())
        _wait_for(session, present="? Help", timeout=60.0)
        pid = _child(shell)  # `env` became python
        time.sleep(3.0)  # start-up done; the second after the last input has passed
        before = _switches(pid)
        time.sleep(3.0)
        after = _switches(pid)
        woke = sorted(after[tid] - before.get(tid, 0) for tid in after)
        # Textual's own input thread wakes 30-31 times in 3 s whatever else happens; here no
        # thread comes near (the UI thread, the busiest, draws once a second: ~15)
        assert woke[-1] < 24, woke

        # a key after the quiet spell is read at once; so is a lone Esc (the parser's
        # timeout still ticks while it holds a half-read key); q ends the program at once
        took, _ = _wait_for(_send(session, "?"), present="sparkdeck keys", timeout=5.0)
        assert took < 1.0, took
        time.sleep(2.0)
        took, _ = _wait_for(_send(session, "Escape"), absent="sparkdeck keys", timeout=5.0)
        assert took < 1.0, took
        time.sleep(2.0)
        took, screen = _wait_for(_send(session, "q"), present="SPARKDECK-EXITED", timeout=5.0)
        assert took < 1.0, took
        assert "Traceback" not in screen, screen
    finally:
        subprocess.run(["tmux", "kill-session", "-t", session], capture_output=True)


def _send(session: str, key: str) -> str:
    tmux("send-keys", "-t", session, key)
    return session
