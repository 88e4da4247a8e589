"""The watchdog's stop action: Docker first, the kernel when Docker does not answer.

When the host is running out of memory the Docker daemon is often the first thing to stall
(or it is stopped outright), and a `docker stop` that waits 30 s on it - or raises - leaves
the engine eating the last of the memory. So each attempt asks Docker to kill and remove
sparkdeck's container in a thread of its own, with a short stated timeout; when Docker has
not answered within `answer_s` (or failed), the container's processes are SIGKILLed directly,
found without the daemon through /proc/*/cgroup and the container's full id. Docker is asked
again on the next attempt until it confirms the container is gone: the watchdog calls this
once per sample until then.

Only sparkdeck's own container is ever touched: the id comes from an EngineState that the
runtime read from Docker with sparkdeck's label and scope, DockerRuntime.stop checks the
label again, and a process is killed only when its cgroup path names that full 64-hex id.
"""

from __future__ import annotations

import os
import re
import signal
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from sparkdeck.runtime.errors import NotManaged

if TYPE_CHECKING:
    from sparkdeck.runtime.client import DockerRuntime

DOCKER_TIMEOUT_S = 3.0  # the guard's Docker client gives up on any call after this
ANSWER_S = 0.8  # how long an attempt waits on Docker before killing processes directly
_FULL_ID = re.compile(r"^[0-9a-f]{64}$")


@dataclass(frozen=True)
class StopAttempt:
    """What one attempt did. `done`: Docker confirmed the container is stopped and removed."""

    done: bool
    text: str  # one line for a person: "stop failed: Docker is not answering; killed 3 ..."
    killed: int = 0  # processes SIGKILLed directly by this attempt
    at: float = 0.0  # time.monotonic() when it ended (for done: when Docker confirmed)

    def to_dict(self) -> dict[str, object]:
        return {"done": self.done, "text": self.text, "killed": self.killed}


def container_pids(container_id: str, proc: Path = Path("/proc")) -> list[int]:
    """PIDs of the processes in the container's cgroup, read from /proc without Docker.

    A process belongs to the container when a line of its /proc/PID/cgroup names the
    container's full id as (part of) a path component: `/docker/ID` (cgroupfs) or
    `/system.slice/docker-ID.scope` (systemd). A short or malformed id finds nothing.
    """
    if not _FULL_ID.match(container_id):
        return []
    pattern = re.compile(rf"(^|[/\-]){container_id}(\.scope)?(/|$)")
    found = []
    for entry in proc.iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            lines = (entry / "cgroup").read_text().splitlines()
        except OSError:  # gone meanwhile, or not ours to read
            continue
        if any(pattern.search(line.split(":", 2)[-1]) for line in lines):
            found.append(int(entry.name))
    return sorted(found)


def kill_pids(pids: list[int]) -> int:
    """SIGKILL each PID; the number that were still there to kill."""
    killed = 0
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
            killed += 1
        except (ProcessLookupError, PermissionError):
            continue
    return killed


def _reason(exc: BaseException) -> str:
    text = str(exc) or type(exc).__name__
    lower = text.lower()
    if "timed out" in lower or "not answering" in lower or "timeout" in type(exc).__name__.lower():
        return "Docker is not answering"
    return text.splitlines()[0][:200]


class ContainerStopper:
    """Stops one sparkdeck container however long Docker takes; call it until `done`."""

    def __init__(
        self,
        runtime: DockerRuntime,
        container_id: str,
        *,
        answer_s: float = ANSWER_S,
        find_pids: Callable[[str], list[int]] = container_pids,
        kill: Callable[[list[int]], int] = kill_pids,
    ):
        self.runtime = runtime
        self.container_id = container_id
        self.answer_s = answer_s
        self.find_pids = find_pids
        self.kill = kill
        self.killed_total = 0
        self._call: threading.Thread | None = None
        self._finished = threading.Event()
        self._error: BaseException | None = None
        self._done_at: float | None = None

    @classmethod
    def for_engine(
        cls, runtime: DockerRuntime, container_id: str, timeout: float = DOCKER_TIMEOUT_S
    ) -> ContainerStopper:
        """A stopper whose Docker calls give up after `timeout` seconds."""
        return cls(runtime.with_timeout(timeout), container_id)

    def _docker_stop(self) -> None:
        try:
            self.runtime.stop(self.container_id, grace=0)  # gone already: returns at once
            self._done_at = time.monotonic()
        except BaseException as exc:  # noqa: BLE001 - reported by the attempt that sees it
            self._error = exc
        finally:
            self._finished.set()

    def __call__(self) -> StopAttempt:
        if self._call is None:  # a call still waiting on a hung daemon is not doubled
            self._finished.clear()
            self._error = None
            self._call = threading.Thread(
                target=self._docker_stop, daemon=True, name="sparkdeck-guard-stop"
            )
            self._call.start()
        if self._finished.wait(self.answer_s):
            self._call = None
            error = self._error
            if error is None:
                return StopAttempt(True, self._stopped_text(), 0, self._done_at or time.monotonic())
            if isinstance(error, NotManaged):  # not ours: nothing may be killed
                return StopAttempt(False, f"stop refused: {error}", 0, time.monotonic())
            head, tail = f"stop failed: {_reason(error)}", "retrying"
        else:  # still waiting on Docker: the kill does not wait with it
            head = f"Docker has not answered the stop within {self.answer_s:g} s"
            tail = "waiting for Docker to remove the container"
        killed = self.kill(self.find_pids(self.container_id))
        self.killed_total += killed
        if killed:
            action = (
                f"killed {killed} process{'es' if killed != 1 else ''} of the container directly"
            )
        else:
            action = "no process of the container is left"
        return StopAttempt(False, f"{head}; {action}; {tail}", killed, time.monotonic())

    def _stopped_text(self) -> str:
        if self.killed_total:
            return (
                f"stopped: Docker removed the container ({self.killed_total} of its "
                "processes had been killed directly)"
            )
        return "stopped: Docker killed and removed the container"
