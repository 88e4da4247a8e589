"""Following one engine container's log in a way another thread can stop.

`DockerRuntime.follow_logs` blocks in a socket read until the next line: fine for the CLI,
where Ctrl-C ends it, but a UI worker stuck there would keep the process alive after quit
and keep following a container the user has switched away from. The docker SDK's log
stream is cancellable (closing it shuts the socket), so `close()` from any thread ends
`batches()` at once.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from typing import Any

import docker.errors
import requests

from sparkdeck.docker_errors import DockerRuntimeError, DockerUnavailable, unavailable_message
from sparkdeck.docker_runtime import DockerRuntime

TAIL_LINES = 200


class LogFollower:
    """Yields the container's log in batches of lines, as the daemon sends them."""

    def __init__(self, runtime: Callable[[], DockerRuntime], container_id: str,
                 tail: int = TAIL_LINES) -> None:
        self._runtime = runtime  # called in the following thread: it may connect
        self.container_id = container_id
        self._tail = tail
        self._stream: Any = None
        self._closed = threading.Event()

    def batches(self) -> Iterator[list[str]]:
        """Each chunk's complete lines; ends when the container goes or close() is called.

        Raises DockerUnavailable when the daemon cannot be reached, DockerRuntimeError when
        the container is gone before following starts.
        """
        try:
            container = self._runtime().client.containers.get(self.container_id)
            self._stream = container.logs(stream=True, follow=True, tail=self._tail)
        except docker.errors.NotFound as exc:
            raise DockerRuntimeError(f"container {self.container_id[:12]} is gone") from exc
        except (requests.exceptions.ConnectionError, docker.errors.DockerException) as exc:
            if isinstance(exc, docker.errors.APIError):
                raise DockerRuntimeError(str(exc)) from exc
            raise DockerUnavailable(unavailable_message(str(exc))) from exc
        if self._closed.is_set():
            self._stream.close()
            return
        pending = b""
        try:
            for chunk in self._stream:
                pending += chunk
                *lines, pending = pending.split(b"\n")
                if lines:
                    yield [line.decode("utf-8", "replace").rstrip("\r") for line in lines]
        except (OSError, ValueError, AttributeError, requests.exceptions.RequestException):
            if not self._closed.is_set():
                raise
            return  # the socket was shut by close(): the normal end
        if pending:
            yield [pending.decode("utf-8", "replace")]

    def close(self) -> None:
        """Stop following (safe from any thread, and more than once)."""
        self._closed.set()
        stream = self._stream
        if stream is not None:
            try:
                stream.close()
            except (OSError, AttributeError):
                pass
