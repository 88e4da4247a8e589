"""The endpoint's listening socket, as the service serves it (real sockets on loopback).

What a broken listener gets wrong here: a connection it accepts keeps Nagle's algorithm on.
asyncio turns Nagle off only on sockets whose `proto` says TCP, and an accepted socket
copies the listener's, which `socket.create_server` leaves 0; a streamed answer (headers,
then the body) to a client on a kept-alive connection then waits for that client's delayed
ACK before its first token: +40 ms on Linux (test_endpoint_traffic.py times it against the
real llama-server; benchmarks/endpoint_overhead.py measured +44 ms at 64 tokens).
"""

from __future__ import annotations

import asyncio
import socket

import pytest

from sparkdeck.config.settings import EndpointSettings
from sparkdeck.endpoint.listener import open_listener
from tests.conftest import free_port


@pytest.mark.anyio
async def test_every_connection_the_endpoint_accepts_sends_without_nagle() -> None:
    listener = open_listener(EndpointSettings(port=free_port()))
    accepted: list[int] = []

    def connected(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        sock = writer.get_extra_info("socket")
        accepted.append(sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY))
        writer.close()

    # the way uvicorn serves it: an asyncio server on the socket the service made
    async with await asyncio.start_server(connected, sock=listener):
        host, port = listener.getsockname()[:2]
        _, writer = await asyncio.open_connection(host, port)
        for _ in range(100):
            if accepted:
                break
            await asyncio.sleep(0.01)
        writer.close()
    assert accepted == [1], f"TCP_NODELAY on the accepted connection: {accepted}"
