"""The sparkdeck services a test started, found and ended after it.

The service is on in tests as it is for a user (conftest's `isolated_dirs`), so any launch,
stop or guard a test drives may start one, detached in its own session: it outlives the
command that started it. Left running, 900 tests would leave hundreds of services behind,
each waking every second and guarding engines that are gone. After each test every service
of its own dirs is ended the way `sparkdeck service stop` ends one (SIGTERM, and SIGCONT so
that a stopped one runs to its clean exit), then SIGKILLed if it is still there after
STOP_S, and waited for until its process is gone.

A test's services are found two ways: the holder of the service lock in its data dir (the
one `sparkdeck service stop` would end), and any `-m sparkdeck.service` process whose
environment names the test's own runtime dir (one started with other data dirs, which the
lock in this test's data dir does not show).
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

STOP_S = 10.0  # `sparkdeck service stop`'s own default timeout
GONE_S = 5.0  # after SIGKILL: the kernel ends it at once unless it is stuck in the kernel


def services_of(runtime_dir: Path) -> set[int]:
    """The pids of the services this test's dirs have: the lock holder, and every service
    process started with SPARKDECK_RUNTIME_DIR=`runtime_dir`."""
    from sparkdeck.service.liveness import lock_holder

    found = {pid for pid in [lock_holder()] if pid is not None}
    wanted = b"SPARKDECK_RUNTIME_DIR=" + os.fsencode(runtime_dir)
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            argv = (entry / "cmdline").read_bytes().split(b"\0")
            if b"sparkdeck.service" not in argv:
                continue
            if wanted in (entry / "environ").read_bytes().split(b"\0"):
                found.add(int(entry.name))
        except OSError:  # it ended while we looked, or is not ours to read
            continue
    return found


def end_test_services(runtime_dir: Path) -> list[int]:
    """End every service of this test (see the module's docstring); the pids ended."""
    pids = sorted(services_of(runtime_dir))
    if not pids:  # most tests: no clock read (some tests patch time.monotonic)
        return []
    for pid in pids:
        _signal(pid, signal.SIGTERM)
        _signal(pid, signal.SIGCONT)  # a stopped (SIGSTOP) service resumes only to end
    deadline = time.monotonic() + STOP_S
    left = [pid for pid in pids if not _gone(pid)]
    while left and time.monotonic() < deadline:
        time.sleep(0.05)
        left = [pid for pid in left if not _gone(pid)]
    for pid in left:  # did not stop: not left behind either
        _signal(pid, signal.SIGKILL)
    deadline = time.monotonic() + GONE_S
    while left and time.monotonic() < deadline:
        time.sleep(0.05)
        left = [pid for pid in left if not _gone(pid)]
    if left:
        raise AssertionError(f"sparkdeck service process(es) {left} outlived SIGKILL")
    return pids


def _signal(pid: int, sig: signal.Signals) -> None:
    try:
        os.kill(pid, sig)
    except ProcessLookupError:
        pass


def _gone(pid: int) -> bool:
    """Ended: no process, or a zombie (reaped here when it is this process's child: a
    service a test started in-process, through ensure_running's Popen)."""
    try:
        if os.waitpid(pid, os.WNOHANG)[0] == pid:
            return True
    except ChildProcessError:  # not our child: its parent (or init) reaps it
        pass
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True
    return stat[stat.rindex(")") + 2] == "Z"
