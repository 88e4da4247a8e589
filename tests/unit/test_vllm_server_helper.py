"""The vLLM server helper's own behaviour, with real (small) processes instead of vLLM.

Starting vLLM takes a minute; how the helper waits, fails and cleans up can be checked in a
second with processes that exit, hang or ignore SIGTERM on purpose.
"""

from __future__ import annotations

import os
import signal
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import free_port
from tests.support.vllm_server import (
    VllmStartError,
    start_logged,
    stop_group,
    wait_healthy,
)

# A parent that exits on SIGTERM and a child that ignores it, as vLLM's API server and engine
# core could: the child's pid goes to a file so the test can look for it afterwards.
_STUBBORN_FAMILY = r"""
import os, signal, subprocess, sys, time
child = subprocess.Popen([sys.executable, "-c",
    "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
    "open(%r, 'w').write('ready'); time.sleep(600)" % (sys.argv[1] + ".ready")])
open(sys.argv[1], "w").write(str(child.pid))
time.sleep(600)
"""


def _gone(pid: int) -> bool:
    """No such process, or only a zombie waiting for init to reap it."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return True
    return state == "Z"


def _wait_for(path: Path, seconds: float = 30.0) -> None:
    deadline = time.monotonic() + seconds
    while not path.exists():
        assert time.monotonic() < deadline, f"{path} never appeared"
        time.sleep(0.05)


def test_exit_before_healthy_fails_with_code_and_log_tail(tmp_path):
    log = tmp_path / "server.log"
    process = start_logged(
        [sys.executable, "-c", "print('model dir not found: /nowhere'); raise SystemExit(3)"],
        dict(os.environ),
        log,
    )
    with pytest.raises(VllmStartError) as failed:
        wait_healthy(process, f"http://127.0.0.1:{free_port()}", log, timeout=60)
    message = str(failed.value)
    assert "exited with code 3" in message and "model dir not found: /nowhere" in message


def test_never_healthy_times_out_with_log_tail(tmp_path):
    log = tmp_path / "server.log"
    loading = "print('still loading', flush=True); import time; time.sleep(600)"
    process = start_logged([sys.executable, "-c", loading], dict(os.environ), log)
    try:
        started = time.monotonic()
        with pytest.raises(VllmStartError, match="not healthy after 2 s") as failed:
            wait_healthy(process, f"http://127.0.0.1:{free_port()}", log, timeout=2)
        assert time.monotonic() - started < 30
        assert "still loading" in str(failed.value)
    finally:
        stop_group(process, grace=5)


def test_stop_kills_the_whole_group_even_a_child_ignoring_sigterm(tmp_path):
    pid_file = tmp_path / "child.pid"
    process = start_logged(
        [sys.executable, "-c", _STUBBORN_FAMILY, str(pid_file)],
        dict(os.environ),
        tmp_path / "family.log",
    )
    _wait_for(Path(str(pid_file) + ".ready"))
    child = int(pid_file.read_text())
    assert not _gone(child)
    started = time.monotonic()
    stop_group(process, grace=2)
    assert time.monotonic() - started < 20
    assert process.returncode is not None
    deadline = time.monotonic() + 10
    while not _gone(child):  # SIGKILL is delivered at once; the state may lag a moment
        assert time.monotonic() < deadline, f"child {child} survived stop_group"
        time.sleep(0.05)


def test_server_goes_when_the_process_that_started_it_is_killed(tmp_path):
    """A test run killed from outside skips teardown: the server must not outlive it."""
    pid_file = tmp_path / "server.pid"
    repo, log = Path(__file__).parents[2], tmp_path / "s.log"
    starter = (
        f"import os, sys, time; sys.path.insert(0, {str(repo)!r})\n"
        "from pathlib import Path\n"
        "from tests.support.vllm_server import start_logged\n"
        "p = start_logged([sys.executable, '-c', 'import time; time.sleep(600)'],"
        f" dict(os.environ), Path({str(log)!r}))\n"
        f"open({str(pid_file)!r}, 'w').write(str(p.pid)); time.sleep(600)\n"
    )
    parent = start_logged(
        [sys.executable, "-c", starter], dict(os.environ), tmp_path / "parent.log"
    )
    server = None
    try:
        _wait_for(pid_file)
        server = int(pid_file.read_text())
        assert not _gone(server)
        parent.kill()  # SIGKILL: no finally, no atexit in the starter
        parent.wait()
        deadline = time.monotonic() + 10
        while not _gone(server):
            assert time.monotonic() < deadline, f"server {server} outlived its starter"
            time.sleep(0.05)
    finally:
        stop_group(parent, grace=1)
        if server is not None and not _gone(server):
            os.killpg(server, signal.SIGKILL)  # what this test started, when it failed
