"""Reading a container's log through the docker SDK: both streams merged in order, times
parsed, a byte stream cut into lines, and the one follower another thread can stop. Every
line comes out cleaned (text_safety): an engine's output is shown by the CLI, the log pane,
the engine card and status, never obeyed.

Kept apart from the runtime's lifecycle code (start, readiness, stop): these functions take
an SDK container object and do no ownership checks; DockerRuntime does those first.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Iterator
from typing import TYPE_CHECKING, Any

import docker.errors
import requests

from sparkdeck.runtime.errors import DockerRuntimeError
from sparkdeck.runtime.sdk import daemon_errors
from sparkdeck.text_safety import clean

if TYPE_CHECKING:
    from sparkdeck.runtime.client import DockerRuntime

TAIL_LINES = 200
# how often a follow of a created container looks for its start: soon at first (a launch
# starts what it created within a moment), then less often (one left created by a launch
# killed between its create and its start is not inspected five times a second for ever)
START_POLL_S = 0.2
START_POLL_MAX_S = 2.0


def stamped_lines(container: Any, lines: int | str) -> list[tuple[str, str]]:
    """The last `lines` lines ("all" for every line) as (RFC 3339 stamp, text), in order.

    Each stream is read on its own and merged by timestamp: asked for both at once, dockerd
    20.10's json-file `tail` was seen to drop a final stderr line (the one that says why an
    engine died).
    """
    stamped: list[tuple[str, str]] = []
    for stream in ("stdout", "stderr"):
        try:
            raw = container.logs(
                tail=lines, timestamps=True, stdout=stream == "stdout", stderr=stream == "stderr"
            )
        except docker.errors.APIError:
            continue
        for line in raw.decode("utf-8", "replace").split("\n"):
            if not line:
                continue
            stamp, _, text = line.partition(" ")
            stamped.append((stamp, clean(text.rstrip("\r"))))
    stamped.sort(key=lambda pair: pair[0])  # RFC 3339 with fixed nanoseconds sorts as text
    return stamped if lines == "all" else stamped[-int(lines) :]


def line_batches(chunks: Iterable[bytes]) -> Iterator[list[str]]:
    """Cut a streamed log (chunks that need not end at a newline) into cleaned text lines,
    one batch per chunk that completes at least one line."""
    pending = b""
    for chunk in chunks:
        pending += chunk
        *lines, pending = pending.split(b"\n")
        if lines:
            yield [clean(line.decode("utf-8", "replace").rstrip("\r")) for line in lines]
    if pending:
        yield [clean(pending.decode("utf-8", "replace"))]


# Following: the UI's log pane and `sparkdeck logs` read the same follower.
def container_going(exc: docker.errors.APIError) -> bool:
    """Did the daemon refuse because the container is gone or being removed? (dockerd says
    404 "No such container", or 409 "can not get logs from container which is dead or marked
    for removal" while a forced remove runs.)"""
    text = str(exc.explanation or exc).lower()
    return exc.status_code == 404 or "marked for removal" in text or "no such container" in text


class LogFollower:
    """Yields the container's log in batches of lines, as the daemon sends them."""

    def __init__(
        self,
        runtime: Callable[[], DockerRuntime],
        container_id: str,
        tail: int = TAIL_LINES,
        follow: bool = True,
    ) -> None:
        self._runtime = runtime  # called in the following thread: it may connect
        self.container_id = container_id
        self._tail = tail
        self._follow = follow  # False: the last `tail` lines, then the end
        self._stream: Any = None
        self._closed = threading.Event()

    def batches(self) -> Iterator[list[str]]:
        """Each chunk's complete lines; ends when the container goes or close() is called.

        A container that is gone (or being removed) before or while following is the normal
        end of its log, not a failure: a switch removes the old engine while the UI may
        still be starting to follow it. Docker ends a follow of a container that is created
        but not yet started at once, with no line; the UI follows a new engine as soon as
        Docker says it was created, so the follower waits for the start (or the end) and
        follows again. Raises DockerUnavailable (DockerNotAnswering for a daemon that never
        replies) when the daemon cannot be reached, DockerRuntimeError for any other refusal.
        """
        while True:
            container = self._open()
            if container is None:
                return
            created = container.status == "created"  # as Docker said when it was opened
            read = False
            for batch in self._read():
                read = True
                yield batch
            if read or not self._follow or not created:
                return
            # followed before its start: again once it has started (running, or already
            # ended: then its whole log comes and the follow ends), never once it is gone
            poll = START_POLL_S
            while (state := self._state(container)) == "created":
                if self._closed.wait(poll):
                    return
                poll = min(poll * 2, START_POLL_MAX_S)
            if state is None or self._closed.is_set():
                return

    def _open(self) -> Any:
        """The container, its log stream open in self._stream; None when it is gone or
        this follower was closed."""
        try:
            with daemon_errors():
                container = self._runtime().client.containers.get(self.container_id)
                self._stream = container.logs(stream=True, follow=self._follow, tail=self._tail)
        except docker.errors.NotFound:
            return None
        except docker.errors.APIError as exc:
            if container_going(exc):
                return None
            raise DockerRuntimeError(str(exc)) from exc
        if self._closed.is_set():
            self._stream.close()
            return None
        return container

    def _read(self) -> Iterator[list[str]]:
        try:
            yield from line_batches(self._stream)
        except (OSError, ValueError, AttributeError, requests.exceptions.RequestException):
            if self._closed.is_set() or self._gone():
                return  # shut by close(), or cut by the container's removal: the normal end
            raise

    def _state(self, container: Any) -> str | None:
        """Docker's state of the container now; None when it is gone or going."""
        try:
            with daemon_errors():
                container.reload()
        except docker.errors.APIError:
            return None
        return str(container.status)

    def _gone(self) -> bool:
        """Is the container gone (or going) now? Asked after the stream broke off."""
        try:
            self._runtime().client.containers.get(self.container_id)
        except docker.errors.NotFound:
            return True
        except docker.errors.APIError as exc:
            return container_going(exc)
        except (
            requests.exceptions.RequestException,
            docker.errors.DockerException,
            DockerRuntimeError,
        ):
            return False
        return False

    def close(self) -> None:
        """Stop following (safe from any thread, and more than once)."""
        self._closed.set()
        stream = self._stream
        if stream is not None:
            try:
                stream.close()
            except (OSError, AttributeError):
                pass
