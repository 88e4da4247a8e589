"""uvicorn's Server, made to sleep while nobody is connected.

An idle service's CPU is almost all wake-ups, and on a machine that has been idle a wake-up
costs far more than the work it does (caches and the hypervisor's pages gone cold: measured
at 1-4 ms of CPU for a few microseconds of work, docs/performance.md). uvicorn's housekeeping
loop wakes ten times a second to look for a signal to exit and to refresh its Date header.
Here it wakes once a second while a connection is open and not at all while none is: a new
connection refreshes the Date header itself and starts the ticking, and an exit request
(a signal, or `request_exit` from the loop) wakes the loop at once.

EndpointListener is the OpenAI endpoint's own such server, which the service runs beside
its API (the endpoint package is the app; serving it is the service's).
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import threading
import time
from collections.abc import Callable, Iterator
from email.utils import formatdate
from typing import TYPE_CHECKING, Any

import uvicorn

from sparkdeck.config.settings import EndpointSettings
from sparkdeck.endpoint.listener import open_listener

if TYPE_CHECKING:
    from sparkdeck.service.guarding import GuardFollower
    from sparkdeck.service.owner import EngineOwner

TICK_S = 1.0  # housekeeping while connections are open (uvicorn counts tenths)


class _Connections(set):
    """uvicorn's set of open connections, which tells when one is added."""

    def __init__(self, on_open: Callable[[], None]) -> None:
        super().__init__()
        self._on_open = on_open

    def add(self, item: Any) -> None:
        super().add(item)
        self._on_open()


class QuietServer(uvicorn.Server):
    def __init__(self, config: uvicorn.Config, *, takes_signals: bool = True) -> None:
        super().__init__(config)
        self._takes_signals = takes_signals
        self._loop: asyncio.AbstractEventLoop | None = None
        self._wake: asyncio.Event | None = None
        self.server_state.connections = _Connections(self._opened)

    async def main_loop(self) -> None:
        self._loop, self._wake = asyncio.get_running_loop(), asyncio.Event()
        counter = 0
        while not await self.on_tick(counter):
            counter += 10  # on_tick counts tenths of a second: every call refreshes Date
            self._wake.clear()
            idle = not self.server_state.connections
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), None if idle else TICK_S)

    def request_exit(self) -> None:
        """Stop serving (from the loop's thread or a signal handler): wakes the loop now."""
        self.should_exit = True
        self._poke()

    def handle_exit(self, sig: int, frame: Any) -> None:
        super().handle_exit(sig, frame)
        self._poke()

    def _poke(self) -> None:
        if self._loop is not None and self._wake is not None and not self._loop.is_closed():
            self._loop.call_soon_threadsafe(self._wake.set)

    def _opened(self) -> None:
        # uvicorn's protocols add themselves as a connection opens, in the loop: the first
        # answer after a quiet spell must not carry the Date of the last tick
        config = self.config
        date = (
            [(b"date", formatdate(time.time(), usegmt=True).encode())] if config.date_header else []
        )
        self.server_state.default_headers = date + config.encoded_headers
        if self._wake is not None:
            self._wake.set()

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        # uvicorn's own raises SIGTERM again once it has shut down, which ends the process
        # before serve()'s clean-up: the recorder's clean-stop mark was never written and
        # every `sparkdeck service stop` read as a crash at the next start. A second server
        # in the same process (the OpenAI endpoint) takes none: two servers restoring each
        # other's handlers could end the process before its clean-up.
        if not self._takes_signals or threading.current_thread() is not threading.main_thread():
            yield
            return
        handled = (signal.SIGINT, signal.SIGTERM)
        before = {sig: signal.signal(sig, self.handle_exit) for sig in handled}
        try:
            yield
        finally:
            for sig, handler in before.items():
                signal.signal(sig, handler)


class EndpointListener:
    """The endpoint's own uvicorn server on its TCP socket, served beside the service's API
    in the same loop. It takes no signals: the API's server does, and stops this one."""

    def __init__(
        self, settings: EndpointSettings, follower: GuardFollower, owner: EngineOwner | None = None
    ) -> None:
        from sparkdeck.endpoint.app import build_endpoint

        self.sock = open_listener(settings)
        self.address = self.sock.getsockname()[:2]
        app, self._close = build_endpoint(follower, settings, owner=owner)
        # log_config None: uvicorn's records go to the service's log (service_log), not to
        # handlers of its own
        self._server = QuietServer(
            uvicorn.Config(
                app, log_level="warning", lifespan="off", access_log=False, log_config=None
            ),
            takes_signals=False,
        )
        self._task: asyncio.Task | None = None

    def start(self) -> None:
        self._task = asyncio.create_task(
            self._server.serve(sockets=[self.sock]), name="openai endpoint"
        )

    async def stop(self) -> None:
        self._server.request_exit()
        if self._task is not None:
            await asyncio.gather(self._task, return_exceptions=True)
        await self._close()
        self.sock.close()
