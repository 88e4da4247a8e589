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

Every signal here goes through a pidfd (`Pinned`), opened while the process is known to be the
service: a pid read once and signalled later can name another process by then. pid_max is
32768 on these machines, and a parallel run's processes and threads go through it in minutes
(pids wrapped at least once in a 21-minute stretch of 2026-12-05), so the `kill -9 PID` "for
safety" that the fixtures sent after a service had stopped could reach whatever got that pid
since: another test's engine, server or daemon. A pidfd signals its own process or nobody.
"""

from __future__ import annotations

import os
import select
import signal
import subprocess
import time
from pathlib import Path

from tests.support.cli import run_cli

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


class Pinned:
    """One process, held by a pidfd: a signal through it reaches that process, or nobody once
    it ended (never a later process that got its pid)."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        try:
            self._fd: int | None = os.pidfd_open(pid)
        except ProcessLookupError:
            self._fd = None  # ended already

    def signal(self, sig: signal.Signals) -> None:
        if self._fd is None:
            return
        try:
            signal.pidfd_send_signal(self._fd, sig)
        except ProcessLookupError:
            pass

    def gone(self) -> bool:
        """Ended: a pidfd reads ready once its process exits (a zombie included). One that is
        this process's child (a service a test started in-process, through ensure_running's
        Popen) is reaped here."""
        if self._fd is None:
            return True
        if not select.select([self._fd], [], [], 0)[0]:
            return False
        try:
            os.waitid(os.P_PIDFD, self._fd, os.WEXITED | os.WNOHANG)
        except ChildProcessError:  # not our child: its parent (or init) reaps it
            pass
        return True

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


def end_test_services(runtime_dir: Path) -> list[int]:
    """End every service of this test (see the module's docstring); the pids ended."""
    pinned = [Pinned(pid) for pid in sorted(services_of(runtime_dir))]
    if not pinned:  # most tests: no clock read (some tests patch time.monotonic)
        return []
    try:
        for service in pinned:
            service.signal(signal.SIGTERM)
            service.signal(signal.SIGCONT)  # a stopped (SIGSTOP) service resumes only to end
        deadline = time.monotonic() + STOP_S
        left = [service for service in pinned if not service.gone()]
        while left and time.monotonic() < deadline:
            time.sleep(0.05)
            left = [service for service in left if not service.gone()]
        for service in left:  # did not stop: not left behind either
            service.signal(signal.SIGKILL)
        deadline = time.monotonic() + GONE_S
        while left and time.monotonic() < deadline:
            time.sleep(0.05)
            left = [service for service in left if not service.gone()]
        if left:
            stuck = [service.pid for service in left]
            raise AssertionError(f"sparkdeck service process(es) {stuck} outlived SIGKILL")
    finally:
        for service in pinned:
            service.close()
    return [service.pid for service in pinned]


def stop_service(
    env: dict[str, str], service: Pinned | int | None, timeout: float = 30
) -> subprocess.CompletedProcess[str]:
    """`sparkdeck service stop`, then SIGKILL through `service`'s pidfd (pinned when its pid
    was read, or now for a pid read just before): a wedged one is not left behind, one that
    stopped gets nothing, and no other process can."""
    pinned = Pinned(service) if isinstance(service, int) else service
    try:
        return run_cli("service", "stop", env=env, timeout=timeout)
    finally:
        if pinned is not None:
            pinned.signal(signal.SIGKILL)
            pinned.close()
