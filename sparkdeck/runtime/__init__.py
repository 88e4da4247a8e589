"""The Docker lifecycle of an engine container: the one place the docker SDK is imported.

client (DockerRuntime and `connect()`), errors (the typed failures and the SDK translation),
spec (what to start), logs (reading and following a container's log), pull (image pull
progress) and state (what a container is doing). Importing this package loads nothing: the
TUI's first frame must not wait for the docker SDK, so each module is imported by name,
and `connect()` imports the client when it is first called.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from sparkdeck.runtime.client import DockerRuntime
    from sparkdeck.runtime.state import EngineState


def connect() -> DockerRuntime:
    """The one way front ends connect to the daemon (the CLI, the TUI, chat, bench, metrics):
    raises DockerUnavailable (DockerNotAnswering for a daemon that never replies). The SDK
    loads with the first call, not with this package."""
    from sparkdeck.runtime.client import DockerRuntime

    return DockerRuntime.connect()


def current_engine() -> tuple[DockerRuntime | None, EngineState | None]:
    """`connect()` and sparkdeck's engine (None when there is none); (None, None) when the
    daemon cannot be reached, for the callers that go on without it (attached engines need
    no Docker)."""
    from sparkdeck.runtime.errors import DockerRuntimeError

    try:
        runtime = connect()
        return runtime, runtime.current()
    except DockerRuntimeError:
        return None, None
