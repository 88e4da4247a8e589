"""The endpoint's HTTP connection to the engine: HTTP/1.1 on asyncio, answers parsed by httptools.

Why no client library here (the rest of sparkdeck speaks httpx): the endpoint's promise is
at most 2 ms added to a stream's first token, and on a 2-core host the client was most of
it. CPU of one streamed request up to its first chunk, against a local server that answers
like llama-server (benchmarks/upstream_client.py, 2026-12-04): aiohttp's client 850-1000 µs
(httpx's more), the same request written here and parsed by httptools 330-600 µs (the
lower on uvloop, the service's loop). What is
written here is the request line and headers, the pool and the two rules below; the answer
is parsed by httptools (llhttp, the C parser uvicorn serves the endpoint's callers with),
which also undoes the chunked transfer coding.

The engine gets what the caller sent and nothing a client would add (no User-Agent, Accept,
Accept-Encoding or Content-Type of its own, no cookie jar shared between callers, no
redirects followed); answers pass through compressed as they came.

Kept-alive connections and what engines do with them (measured on llama-server b11434,
2026-12-03): it closes a connection idle for 5 s (its `Keep-Alive: timeout=5`), after 100
requests (with `Connection: close`), and right after every streamed (chunked) answer
although that answer said `Keep-Alive`. A pooled connection can so be closed by the engine
just as the pool hands it to the next request: 50 concurrent streams through the endpoint
got 20-54 of 500 requests a 502 that the engine never sent. So: a request whose pooled
connection the engine closed before the first byte of an answer came back is sent once
more, on a new connection (nothing had gone to the caller yet; once the answer began,
nothing is ever sent twice); and the pool lets an idle connection go after KEEPALIVE_S,
before the engine's own 5 s.

A connection kept ready (Envoy's "preconnect"): since llama-server closes the connection of
every streamed answer, each chat request would open a new one, and after seconds of quiet
that connect (through docker-proxy for a published port, which then dials the container)
is the slowest step of the endpoint's part of a first token. So once an answer ends with no
idle connection left, the pool opens one for the next request, and renews it as KEEPALIVE_S
lets it go, for SPARE_FOR_S after the last request; then the service is idle again. It is
one idle connection: one of the engine's HTTP threads on llama-server, which the next
request through the endpoint uses. A spare the engine closed meanwhile is treated as any
pooled one: the request goes again on a new connection.
"""

from __future__ import annotations

import asyncio
import os
import ssl
import time
from collections.abc import AsyncIterator
from typing import Any

from sparkdeck.endpoint.upstream_wire import (
    ClosedBeforeAnswer,
    Connection,
    UpstreamError,
    target,
)

CONNECT_TIMEOUT_S = 5.0  # no read timeout: a long prefill sends nothing for minutes
KEEPALIVE_S = 4.0  # below llama-server's 5 s idle close (uvicorn's own default is 5 s too)
SPARE_FOR_S = 120.0  # a connection is kept ready this long after the last request
MODELS_TIMEOUT_S = 5.0


class UpstreamAnswer:
    """The engine's answer while it streams: status, raw headers and the body's bytes."""

    def __init__(self, connection: Connection, pool: UpstreamPool, key: Any) -> None:
        self._connection, self._pool, self._key = connection, pool, key
        self.status_code = connection.status
        self.raw_headers = connection.headers
        self.content_encoding = next(
            (v.decode("latin-1") for k, v in self.raw_headers if k.lower() == b"content-encoding"),
            None,
        )
        self._done = False

    def aiter_raw(self) -> AsyncIterator[bytes]:
        """The body as it arrives (still compressed if it was); UpstreamError when the
        engine's answer breaks off."""
        return self._connection.chunks()

    async def aread(self) -> bytes:
        return b"".join([chunk async for chunk in self.aiter_raw()])

    def close(self) -> None:
        """After a whole answer a kept-alive connection goes back to the pool; mid-body it
        is closed, which is how an engine learns that the client went away and aborts."""
        if self._done:
            return
        self._done = True
        connection = self._connection
        if connection.complete and connection.keep_alive and not connection.closed:
            self._pool.release(self._key, connection)
        else:
            connection.close()
            self._pool.keep_ready(self._key)


class UpstreamPool:
    """Kept-alive connections to the engine, most recently used first, and the requests
    sent on them."""

    def __init__(self) -> None:
        self._idle: dict[Any, list[Connection]] = {}
        self._opening: dict[Any, asyncio.Task[None]] = {}  # spares being connected
        self._last_request = 0.0  # time.monotonic()
        self._closed = False
        self._tls: ssl.SSLContext | None = None
        self.retried = 0  # requests sent again on a new connection (benchmarks report it)
        # requests the engine did not answer: the finder looks for the engine again after
        # one (endpoint/upstream.py), having trusted what it found until then
        self.failures = 0

    async def send(
        self, method: str, url: str, headers: list[tuple[bytes, bytes]], body: bytes | bytearray
    ) -> UpstreamAnswer:
        """Send a request as given; the answer once its status and headers are in
        (UpstreamError when the engine does not answer). A pooled connection the engine
        closed before the answer began is no answer: the request goes again, once, on a
        new connection."""
        self._last_request = time.monotonic()
        try:
            key, host, path = target(url)
            request = _request(method, host, path, headers, body)
            connection = self._take(key) or await self._connect(key)
            try:
                await self._exchange(connection, request)
            except ClosedBeforeAnswer:
                if not connection.reused:
                    raise
                self.retried += 1
                connection = await self._connect(key)
                await self._exchange(connection, request)
            return UpstreamAnswer(connection, self, key)
        except UpstreamError:
            self.failures += 1
            raise

    async def get_json(self, url: str) -> Any:
        """GET `url` and decode its JSON (UpstreamError or ValueError when it cannot)."""
        import json

        try:
            async with asyncio.timeout(MODELS_TIMEOUT_S):
                answer = await self.send("GET", url, [(b"accept", b"application/json")], b"")
                try:
                    body = await answer.aread()
                finally:
                    answer.close()
        except TimeoutError as exc:
            raise UpstreamError(f"no answer within {MODELS_TIMEOUT_S:.0f} s") from exc
        return json.loads(body)

    async def close(self) -> None:
        self._closed = True
        for task in list(self._opening.values()):
            task.cancel()
        for connections in self._idle.values():
            for connection in connections:
                connection.close()
        self._idle.clear()

    # ----- connections ---------------------------------------------------------------------

    async def _exchange(self, connection: Connection, request: bytes) -> None:
        """Write the request and wait for the answer's status and headers; the connection
        is closed when that does not happen (an error, or the caller gone)."""
        try:
            connection.send(request)
            await connection.head
        except BaseException:
            connection.close()
            raise

    def release(self, key: Any, connection: Connection) -> None:
        """A connection whose answer ended, kept for the next request to `key`."""
        self._idle.setdefault(key, []).append(connection)
        connection.park(
            asyncio.get_running_loop().call_later(KEEPALIVE_S, self._expire, key, connection),
            lambda: self._lost(key, connection),
        )

    def _lost(self, key: Any, connection: Connection) -> None:
        """The engine closed an idle connection. After an answer (llama-server closes the
        connection of each streamed one, often a moment after the answer ended) a ready
        one takes its place; one never used is not replaced, or an engine that closes idle
        connections at once would be reconnected to in a loop."""
        self._forget(key, connection)
        if connection.answers:
            self.keep_ready(key)

    def keep_ready(self, key: Any) -> None:
        """Open a connection to `key` for the next request, unless one is idle or opening,
        or the last request is SPARE_FOR_S old."""
        if (
            self._closed
            or self._idle.get(key)
            or key in self._opening
            or time.monotonic() - self._last_request > SPARE_FOR_S
        ):
            return
        self._opening[key] = asyncio.get_running_loop().create_task(self._open_spare(key))

    async def _open_spare(self, key: Any) -> None:
        try:
            connection = await self._connect(key)
        except UpstreamError:
            return  # the engine is going or gone: the next request finds out for itself
        finally:
            del self._opening[key]
        if self._closed:
            connection.close()
            return
        connection.reused = True  # opened ahead: the engine may close it before it is used
        self.release(key, connection)

    def _take(self, key: Any) -> Connection | None:
        idle = self._idle.get(key)
        while idle:
            connection = idle.pop()
            if connection.take():
                return connection
        return None

    def _expire(self, key: Any, connection: Connection) -> None:
        self._forget(key, connection)
        connection.close()
        self.keep_ready(key)

    def _forget(self, key: Any, connection: Connection) -> None:
        """Take `connection` out of the idle ones (it may have been taken already)."""
        idle = self._idle.get(key, [])
        if connection in idle:
            idle.remove(connection)

    async def _connect(self, key: tuple[str, str, int]) -> Connection:
        scheme, host, port = key
        loop = asyncio.get_running_loop()
        tls = None
        if scheme == "https":
            self._tls = self._tls or ssl.create_default_context()
            tls = self._tls
        try:
            async with asyncio.timeout(CONNECT_TIMEOUT_S):
                _, connection = await loop.create_connection(
                    lambda: Connection(loop), host, port, ssl=tls
                )
        except TimeoutError as exc:
            raise UpstreamError(f"no connection within {CONNECT_TIMEOUT_S:.0f} s") from exc
        except OSError as exc:  # refused, unreachable, a name that does not resolve, TLS
            raise UpstreamError(os.strerror(exc.errno) if exc.errno else str(exc)) from exc
        return connection


def _request(
    method: str,
    host: bytes,
    path: bytes,
    headers: list[tuple[bytes, bytes]],
    body: bytes | bytearray,
) -> bytes:
    """The request's bytes: the caller's headers as they came (uvicorn parsed them: no line
    breaks in them), the Host of the engine and the body's length."""
    lines = [method.encode("ascii"), b" ", path, b" HTTP/1.1\r\nhost: ", host, b"\r\n"]
    for name, value in headers:
        lines += (name, b": ", value, b"\r\n")
    if body or method not in ("GET", "HEAD"):
        lines.append(b"content-length: %d\r\n" % len(body))
    lines += (b"\r\n", bytes(body))
    return b"".join(lines)
