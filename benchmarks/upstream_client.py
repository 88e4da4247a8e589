"""What the endpoint's connection to the engine costs in CPU, per request, up to the answer's
first chunk: sparkdeck's own (sparkdeck/endpoint/upstream_http.py) against aiohttp's client,
each on asyncio's loop and on uvloop.

  .venv/bin/python benchmarks/upstream_client.py [--requests 600]

The engine is a plain socket server in a process of its own, answering each request the way
llama-server answers a streamed one (status and headers, one chunked SSE event, the end,
then the connection closed), so every request opens a new connection, as it does through
the endpoint in front of llama-server. It runs on the first CPU and the client on the second
(where there are two). The figure is the client thread's CPU time (time.thread_time: its
own work and the kernel's on its behalf) from the request's start to its first body chunk,
the median over the requests after the first 100; wall time would mostly measure the
server. Requests are 2 ms apart so each finds the loop idle, as a person's requests do.
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing
import os
import socket
import statistics
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from sparkdeck.endpoint.upstream_http import UpstreamPool
from tests.conftest import free_port

HEAD = (
    b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n"
    b"Keep-Alive: timeout=5, max=100\r\nServer: llama.cpp\r\n\r\n"
)
EVENT = (
    b'data: {"choices":[{"finish_reason":null,"index":0,"delta":{"content":"hi"}}],'
    b'"created":1,"id":"x","model":"m","object":"chat.completion.chunk"}\n\n'
)
BODY = b'{"model":"m","messages":[{"role":"user","content":"hi"}],"max_tokens":1,"stream":true}'
HEADERS = [(b"accept-encoding", b"identity"), (b"content-type", b"application/json")]


def serve(port: int) -> None:
    listener = socket.create_server(("127.0.0.1", port))
    while True:
        conn, _ = listener.accept()
        conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        data = b""
        while b"\r\n\r\n" not in data:
            data += conn.recv(65536)
        head, body = data.split(b"\r\n\r\n", 1)
        length = int(
            next(x for x in head.split(b"\r\n") if x.lower().startswith(b"content-length"))
            .split(b":")[1]
            .strip()
        )
        while len(body) < length:
            body += conn.recv(65536)
        conn.sendall(HEAD + b"%x\r\n%s\r\n" % (len(EVENT), EVENT) + b"0\r\n\r\n")
        conn.close()


async def through_sparkdeck(url: str, requests: int) -> list[float]:
    pool, spent = UpstreamPool(), []
    try:
        for _ in range(requests):
            await asyncio.sleep(0.002)
            began = time.thread_time()
            answer = await pool.send("POST", url, HEADERS, BODY)
            async for _chunk in answer.aiter_raw():
                spent.append(time.thread_time() - began)
                break
            await answer.aread()
            answer.close()
    finally:
        await pool.close()
    return spent


async def through_aiohttp(url: str, requests: int) -> list[float]:
    import aiohttp

    spent: list[float] = []
    connector = aiohttp.TCPConnector(limit=0, keepalive_timeout=4)
    async with aiohttp.ClientSession(
        connector=connector,
        auto_decompress=False,
        cookie_jar=aiohttp.DummyCookieJar(),
        skip_auto_headers=("User-Agent", "Accept", "Accept-Encoding", "Content-Type"),
    ) as session:
        pairs = [(k.decode(), v.decode()) for k, v in HEADERS]
        for _ in range(requests):
            await asyncio.sleep(0.002)
            began = time.thread_time()
            try:
                answer = await session.request(
                    "POST", url, headers=pairs, data=BODY, allow_redirects=False
                )
            except (aiohttp.ClientOSError, aiohttp.ServerDisconnectedError):
                continue  # a pooled connection the server had closed (the endpoint retries)
            async for _chunk in answer.content.iter_any():
                spent.append(time.thread_time() - began)
                break
            await answer.read()
            answer.release()
    return spent


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--requests", type=int, default=600)
    args = parser.parse_args()
    port = free_port()
    server = multiprocessing.Process(target=serve, args=(port,), daemon=True)
    server.start()
    time.sleep(0.3)
    cpus = sorted(os.sched_getaffinity(0))
    if len(cpus) > 1:
        os.sched_setaffinity(server.pid or 0, {cpus[0]})
        os.sched_setaffinity(0, {cpus[1]})
    url = f"http://127.0.0.1:{port}/v1/chat/completions"
    clients: dict[str, Callable[[str, int], Awaitable[list[float]]]] = {
        "sparkdeck": through_sparkdeck,
        "aiohttp": through_aiohttp,
    }
    print(f"CPU per request up to its first chunk, median of {args.requests - 100} requests:")
    for loop in ("asyncio", "uvloop"):
        for name, client in clients.items():
            if loop == "uvloop":
                import uvloop

                spent = uvloop.run(client(url, args.requests))
            else:
                spent = asyncio.run(client(url, args.requests))
            print(f"  {name:10s} on {loop:8s} {statistics.median(spent[100:]) * 1e6:6.0f} µs")
    server.kill()


if __name__ == "__main__":
    main()
