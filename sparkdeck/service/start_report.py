"""How a detached service tells the front end that started it whether it came up.

The starter (sparkdeck.service.client.ensure_running) hands the new process the write end of
a pipe, named by SPARKDECK_SERVICE_REPORT_FD. The service writes one JSON line on it, once:
`{"ok": true, ...}` when its socket listens, or `{"ok": false, "error": ...}` naming what
kept it from starting and what to do, then closes it. The starter reads that line, and
watches the process's exit besides, so a service that cannot start is reported by the
command that asked within a second or so, not after a start-up timeout and a look at
service.log. A service started some other way (systemd, `service run`) has no pipe and
reports nothing.
"""

from __future__ import annotations

import json
import os
import select
import subprocess
import time
from typing import Any

REPORT_FD_ENV = "SPARKDECK_SERVICE_REPORT_FD"


class StartFailed(Exception):
    """Something keeps the service from starting: one line that says what and what to do.
    `kind` lets the starter tell "another service holds the lock" from a real failure."""

    def __init__(self, line: str, kind: str = "failed", code: int = 2) -> None:
        super().__init__(line)
        self.kind = kind
        self.code = code


class StartReport:
    """The service's end of the pipe (a no-op when no starter is listening)."""

    def __init__(self, fd: int | None) -> None:
        self._fd = fd

    @classmethod
    def from_env(cls) -> StartReport:
        raw = os.environ.pop(REPORT_FD_ENV, None)  # not passed on to anything we start
        try:
            fd = int(raw) if raw else None
            if fd is not None:
                os.fstat(fd)
                # a process the service starts (docker's helpers) must not hold the pipe
                # open: the starter reads its end to EOF when the service dies
                os.set_inheritable(fd, False)
        except (ValueError, OSError):
            fd = None
        return cls(fd)

    def ready(self, **facts: Any) -> None:
        self._send({"ok": True, "pid": os.getpid(), **facts})

    def failed(self, exc: StartFailed) -> None:
        self._send({"ok": False, "error": str(exc), "kind": exc.kind})

    def _send(self, message: dict[str, Any]) -> None:
        fd, self._fd = self._fd, None
        if fd is None:
            return
        try:
            os.write(fd, (json.dumps(message) + "\n").encode())
        except OSError:  # the starter gave up (Ctrl-C): nobody to tell
            pass
        finally:
            os.close(fd)


def read_report(fd: int, process: subprocess.Popen, deadline: float) -> dict[str, Any] | None:
    """The service's report from the pipe `fd`, waiting until `deadline` (monotonic).

    None when the service started but the deadline passed before it said so; a report of
    `{"ok": false, "kind": "died"}` when it ended without a word (its exit status in it).
    The process is polled beside the pipe: a service that dies is noticed at once.
    """
    data = b""
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            return None
        readable, _, _ = select.select([fd], [], [], min(left, 0.1))
        if readable:
            chunk = os.read(fd, 4096)
            data += chunk
            if b"\n" in data:
                try:
                    return dict(json.loads(data.split(b"\n", 1)[0]))
                except (ValueError, TypeError):
                    return {
                        "ok": False,
                        "kind": "died",
                        "error": f"it said something unexpected: {data[:200]!r}",
                    }
            if chunk:
                continue
            # EOF with no report: it ended (or closed the pipe, then ended); wait for the exit
            code = _wait_exit(process, deadline)
            return {
                "ok": False,
                "kind": "died",
                "code": code,
                "error": f"it ended at start-up (exit status {code})",
            }
        if process.poll() is not None:  # ended; the pipe's EOF may come on the next turn
            continue


def _wait_exit(process: subprocess.Popen, deadline: float) -> int | None:
    try:
        return process.wait(timeout=max(0.0, deadline - time.monotonic()))
    except subprocess.TimeoutExpired:
        return None
