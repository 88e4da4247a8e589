"""Waiting for a started engine to answer its health check, while Docker says it runs.

DockerRuntime.wait_ready's loop: the container's state from Docker and the engine's health
answer over HTTP, each poll, until one decides (ready, exited, cancelled, timed out).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from sparkdeck.runtime.errors import EngineExited, ReadinessTimeout

if TYPE_CHECKING:
    from sparkdeck.runtime.client import DockerRuntime
    from sparkdeck.runtime.state import EngineState


def wait_ready(
    runtime: DockerRuntime,
    state: EngineState,
    timeout: float,
    poll: float = 0.25,
    cancel: threading.Event | None = None,
    on_poll: Callable[[float], None] | None = None,
) -> EngineState:
    """Poll the health endpoint until it answers 200; raise EngineExited if the container
    stops first, ReadinessTimeout when `cancel` is set or `timeout` passes (with the log's
    tail). `on_poll` gets the seconds waited after each unanswered poll.

    Any httpx.TransportError means "not ready yet": docker-proxy accepts connections
    before the engine listens, so early polls see resets rather than refusals.
    """
    import httpx  # here: the TUI polls Docker idle without an engine (~7 MiB less RSS)

    from sparkdeck.http_limits import capped_client

    url = state.base_url + state.health_path
    deadline = time.monotonic() + timeout
    started = time.monotonic()
    # capped: an engine's health answer that never ends must not fill memory
    with capped_client(timeout=httpx.Timeout(3.0)) as http:
        while True:
            current = runtime.reload(state.container_id)
            if not current.alive:
                code = current.exit_code
                raise EngineExited(
                    f"{state.preset_id} stopped while starting (exit code {code})",
                    code,
                    current.log_tail,
                )
            try:
                if http.get(url).status_code == 200:
                    return current
            except httpx.TransportError:
                pass
            if on_poll is not None:
                on_poll(time.monotonic() - started)
            if cancel is not None and cancel.is_set():
                raise ReadinessTimeout(
                    f"{state.preset_id}: launch cancelled", runtime.tail(state.container_id)
                )
            if time.monotonic() >= deadline:
                raise ReadinessTimeout(
                    f"{state.preset_id} did not answer {state.health_path} with 200 within "
                    f"{timeout:g} s",
                    runtime.tail(state.container_id),
                )
            time.sleep(poll)
