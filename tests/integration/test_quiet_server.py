"""The service's uvicorn server sleeps while nobody is connected (issue 16's idle CPU), and
still dates its answers right and stops at once. Real uvicorn, real HTTP on a Unix socket."""

from __future__ import annotations

import asyncio
import email.utils
import socket
import time
from pathlib import Path

import httpx
import pytest
import uvicorn
from starlette.applications import Starlette
from starlette.responses import PlainTextResponse
from starlette.routing import Route

from sparkdeck.service.quiet_server import QuietServer


class CountingServer(QuietServer):
    ticks = 0

    async def on_tick(self, counter: int) -> bool:
        self.ticks += 1
        return await super().on_tick(counter)


async def _hello(request):
    return PlainTextResponse("hello")


@pytest.mark.anyio
async def test_no_ticks_while_idle_a_fresh_date_after_and_a_prompt_exit(tmp_path: Path) -> None:
    path = str(tmp_path / "api.sock")
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.bind(path)
    sock.listen(8)
    server = CountingServer(
        uvicorn.Config(Starlette(routes=[Route("/", _hello)]), log_level="warning", lifespan="off"),
        takes_signals=False,
    )

    async def scenario() -> None:
        serving = asyncio.ensure_future(server.serve(sockets=[sock]))
        await asyncio.sleep(0.5)
        idle_from = server.ticks
        await asyncio.sleep(3.0)
        # uvicorn's own loop ticks ten times a second: 30 here
        assert server.ticks - idle_from == 0, server.ticks

        transport = httpx.AsyncHTTPTransport(uds=path)
        async with httpx.AsyncClient(transport=transport, base_url="http://service") as http:
            answer = await http.get("/")
            assert answer.text == "hello"
            dated = email.utils.parsedate_to_datetime(answer.headers["date"]).timestamp()
            assert abs(dated - time.time()) < 1.5  # not the Date of the last tick, 3 s ago
            await asyncio.sleep(1.5)  # a connection is open: the housekeeping ticks again
            assert server.ticks - idle_from >= 1

        began = time.monotonic()
        server.request_exit()
        await asyncio.wait_for(serving, 5.0)
        assert time.monotonic() - began < 1.0  # woken at once, not at a next tick

    try:
        await scenario()
    finally:
        sock.close()
