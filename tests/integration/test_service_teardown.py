"""The test kit's end of a test's services (tests/support/service_teardown.py): with the service
on in every test, each service a test started must be gone after it, a stopped (SIGSTOP) one
included, and no other test's service may be touched. Real service processes."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

from sparkdeck.service.liveness import lock_holder
from tests.conftest import free_port
from tests.support.cli import run_cli, wait_for
from tests.support.service_env import service_pid
from tests.support.service_teardown import end_test_services


def started_service(env: dict[str, str]) -> int:
    started = run_cli("service", "start", env=env, timeout=60)
    assert started.returncode == 0, started.stderr
    pid = service_pid(env)
    assert pid is not None
    return pid


def alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat[stat.rindex(")") + 2] != "Z"


def test_the_services_a_test_started_are_ended_and_gone(isolated_dirs):
    ours = started_service(dict(os.environ))
    os.kill(ours, signal.SIGSTOP)  # a test that left its service stopped (a liveness test)
    # another test's service (its own dirs): never ended by this test's clean-up
    other_dir = Path(tempfile.mkdtemp(prefix="sdrt-", dir="/tmp"))
    other_env = {
        **os.environ,
        "SPARKDECK_RUNTIME_DIR": str(other_dir),
        "SPARKDECK_DATA_DIR": str(isolated_dirs["data"]) + "-other",
        "SPARKDECK_CONFIG_DIR": str(isolated_dirs["config"]) + "-other",
        "SPARKDECK_ENDPOINT_PORT": str(free_port()),
    }
    other = started_service(other_env)
    try:
        assert end_test_services(isolated_dirs["runtime"]) == [ours]
        assert not alive(ours) and lock_holder() is None
        assert alive(other)
    finally:
        os.kill(other, signal.SIGKILL)
        shutil.rmtree(other_dir, ignore_errors=True)


def test_a_service_started_with_other_data_dirs_is_found_by_its_runtime_dir(isolated_dirs):
    """A service whose lock is not in this test's data dir (a command run with other dirs)
    but whose socket is in this test's runtime dir is this test's too."""
    env = {**os.environ, "SPARKDECK_DATA_DIR": str(isolated_dirs["data"]) + "-elsewhere"}
    process = subprocess.Popen(
        [sys.executable, "-m", "sparkdeck.service"],
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        socket = isolated_dirs["runtime"] / "service.sock"
        wait_for(socket.exists, timeout=30, what="the service's socket")
        assert lock_holder() is None  # not found through this test's lock
        assert end_test_services(isolated_dirs["runtime"]) == [process.pid]
        assert process.wait(timeout=5) is not None
    finally:
        process.kill()
        process.wait(timeout=10)
