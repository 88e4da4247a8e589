"""The heartbeat probe against real Unix sockets in each state a service can leave behind:
none, a left-over file nobody listens on, a listener that never answers (a wedged loop),
and a service lock held by a stopped process. Each is told apart, within HEARTBEAT_S."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from sparkdeck.service import location
from sparkdeck.service.liveness import (
    HEARTBEAT_S,
    NOT_ANSWERING,
    NOT_RUNNING,
    OFF,
    probe,
    protect_from_oom,
)
from tests.support.cpu_hog import cpu_hog
from tests.support.paused_process import until_stopped

HOLD_LOCK = r"""
import sys, time
from sparkdeck.config.file_lock import FileLock
lock = FileLock("service", "the sparkdeck service")
assert lock.acquire(blocking=False)
print("held", flush=True)
time.sleep(600)
"""


@pytest.fixture
def service_on(monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("SPARKDECK_SERVICE", "auto")
    return location.socket_path()


def test_off_and_no_socket_and_a_left_over_file(
    service_on: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    life = probe()
    assert life.state == NOT_RUNNING and "no socket" in life.detail
    service_on.parent.mkdir(parents=True, exist_ok=True)
    left = socket.socket(socket.AF_UNIX)
    left.bind(str(service_on))  # bound, never listening: what a killed service leaves
    left.close()
    began = time.monotonic()
    life = probe()
    assert life.state == NOT_RUNNING and "left over" in life.detail
    assert time.monotonic() - began < 0.5  # refused at once: nothing to wait for
    monkeypatch.setenv("SPARKDECK_SERVICE", "off")
    assert probe().state == OFF


def test_a_listener_that_never_answers_is_not_answering_within_the_heartbeat(
    service_on: Path,
) -> None:
    service_on.parent.mkdir(parents=True, exist_ok=True)
    with socket.socket(socket.AF_UNIX) as wedged, cpu_hog():
        wedged.bind(str(service_on))
        wedged.listen(8)  # the kernel accepts connections; nobody reads them
        began = time.monotonic()
        life = probe()
        took = time.monotonic() - began
    assert life.state == NOT_ANSWERING
    assert f"no answer within {HEARTBEAT_S:g} s" in life.detail
    assert HEARTBEAT_S - 0.2 <= took <= HEARTBEAT_S + 0.15, f"{took:.2f} s"


def test_a_stopped_lock_holder_is_told_at_once(service_on: Path) -> None:
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLD_LOCK], stdout=subprocess.PIPE, text=True, env=os.environ.copy()
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        service_on.parent.mkdir(parents=True, exist_ok=True)
        with socket.socket(socket.AF_UNIX) as sock:
            sock.bind(str(service_on))
            sock.listen(8)
            os.kill(holder.pid, signal.SIGSTOP)
            until_stopped(holder.pid)  # kill() returns before the process has stopped
            began = time.monotonic()
            life = probe()
            took = time.monotonic() - began
        assert life.state == NOT_ANSWERING and life.pid == holder.pid
        assert "stopped (SIGSTOP)" in life.detail and took < 0.5
    finally:
        os.kill(holder.pid, signal.SIGKILL)
        holder.wait()


def test_the_oom_score_is_lowered_where_allowed_and_says_why_where_not(tmp_path: Path) -> None:
    target = tmp_path / "oom_score_adj"
    target.write_text("0")
    assert "-500" in protect_from_oom(str(target)) and target.read_text() == "-500"
    target.chmod(0o400)
    if os.geteuid() != 0:  # root writes through a 0400 file: only a non-root run sees this
        assert "left as it was" in protect_from_oom(str(target))
    assert "left as it was" in protect_from_oom(str(tmp_path / "no" / "such" / "file"))
