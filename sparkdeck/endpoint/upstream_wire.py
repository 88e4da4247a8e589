"""One HTTP/1.1 connection from the endpoint to the engine, on asyncio, its answer parsed by
httptools (llhttp): the status and headers, the body's chunks as they come, and how the
connection ended. The pool that keeps and reuses these connections, and why the endpoint
speaks HTTP itself, are in sparkdeck.endpoint.upstream_http.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import AsyncIterator, Callable
from functools import lru_cache
from urllib.parse import urlsplit

import httptools

# an answer read ahead of a slow caller: reading from the engine pauses above HIGH and
# resumes below LOW, so a caller that stops reading holds the engine back, not memory
HIGH_WATER, LOW_WATER = 256 * 1024, 64 * 1024


class UpstreamError(Exception):
    """The engine did not answer (refused, reset, timed out): `kind` names the failure."""

    def __init__(self, kind: str) -> None:
        super().__init__(kind)
        self.kind = kind


class ClosedBeforeAnswer(UpstreamError):
    """The connection closed before a byte of the answer came: on a reused connection, the
    engine had closed it under the pool (the request is sent again on a new one)."""


@lru_cache(maxsize=64)
def target(url: str) -> tuple[tuple[str, str, int], bytes, bytes]:
    """(scheme, host, port), the Host header, and the request target of `url`."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise UpstreamError(f"not an http(s) URL: {url}")
    port = parts.port or (443 if parts.scheme == "https" else 80)
    host = f"[{parts.hostname}]" if ":" in parts.hostname else parts.hostname
    default = port == (443 if parts.scheme == "https" else 80)
    path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    return (
        (parts.scheme, parts.hostname, port),
        (host if default else f"{host}:{port}").encode("idna"),
        path.encode("latin-1"),
    )


class Connection(asyncio.Protocol):
    """One HTTP/1.1 connection to the engine, one answer at a time."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._parser = httptools.HttpResponseParser(self)
        self.transport: asyncio.Transport | None = None
        self.closed = False
        self.reused = False  # pooled: the engine may have closed it meanwhile
        self.answers = 0  # whole answers read on it
        self._expiry: asyncio.TimerHandle | None = None
        self._on_lost: Callable[[], None] | None = None
        self._begin()

    def park(self, expiry: asyncio.TimerHandle, on_lost: Callable[[], None]) -> None:
        """Idle in the pool until `expiry` lets it go; `on_lost` if the engine closes it
        first."""
        self._expiry, self._on_lost = expiry, on_lost

    def take(self) -> bool:
        """Out of the pool for the next request; False when the engine closed it."""
        self._on_lost = None
        if self._expiry is not None:
            self._expiry.cancel()
            self._expiry = None
        if self.closed:
            return False
        self.reused = True
        self._begin()
        return True

    def _begin(self) -> None:
        """Ready for the next answer on this connection."""
        self.status = 0
        self.headers: list[tuple[bytes, bytes]] = []
        self.head: asyncio.Future[None] = self._loop.create_future()
        self.complete = False
        self.keep_alive = False
        self.broke: UpstreamError | None = None
        self._answered = False  # a byte of this answer came
        self._sent = False  # a request went on it: someone awaits `head`
        self._framed = False  # its length is known (Content-Length or chunked), not the close
        self._chunks: deque[bytes] = deque()
        self._buffered = 0
        self._paused = False
        self._waiter: asyncio.Future[None] | None = None

    # ----- asyncio.Protocol ----------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]  # a TCP transport (uvloop's is no subclass)

    def data_received(self, data: bytes) -> None:
        self._answered = True
        try:
            self._parser.feed_data(data)
        except httptools.HttpParserError as exc:
            self._fail(UpstreamError(f"a malformed answer ({exc})"))
            self.close()

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        if self._expiry is not None:
            self._expiry.cancel()
        if self._on_lost is not None:  # closed by the engine while idle in the pool
            on_lost, self._on_lost = self._on_lost, None
            on_lost()
        if self.complete:
            return
        if not self.head.done():
            kind = "the engine closed the connection before it answered"
            self._fail(ClosedBeforeAnswer(kind) if not self._answered else UpstreamError(kind))
        elif not self._framed:
            self._ended()  # an answer whose end is the connection's close (HTTP/1.0 style)
        else:
            self._fail(UpstreamError("the engine closed the connection mid-answer"))

    # ----- httptools' callbacks ------------------------------------------------------------

    def on_header(self, name: bytes, value: bytes) -> None:
        self.headers.append((name, value))
        lowered = name.lower()
        if lowered == b"content-length" or (
            lowered == b"transfer-encoding" and b"chunked" in value.lower()
        ):
            self._framed = True

    def on_headers_complete(self) -> None:
        status = self._parser.get_status_code()
        if status < 200:  # an interim answer (103 Early Hints): the real one follows
            self.headers, self._framed = [], False
            return
        self.status = status
        if not self.head.done():
            self.head.set_result(None)

    def on_body(self, body: bytes) -> None:
        self._chunks.append(body)
        self._buffered += len(body)
        if self._buffered > HIGH_WATER and not self._paused and self.transport is not None:
            self._paused = True
            self.transport.pause_reading()
        self._wake()

    def on_message_complete(self) -> None:
        if not self.status:
            return  # the end of an interim answer
        self.keep_alive = self._parser.should_keep_alive()
        self.answers += 1
        self._ended()

    # ----- the answer, as the endpoint reads it ----------------------------------------------

    def send(self, request: bytes) -> None:
        assert self.transport is not None
        if self.closed:  # lost before the request went (its `head` is no longer waited for)
            raise ClosedBeforeAnswer("the engine closed the connection before it answered")
        self._sent = True
        self.transport.write(request)

    async def chunks(self) -> AsyncIterator[bytes]:
        while True:
            if self._chunks:
                chunk = self._chunks.popleft()
                self._buffered -= len(chunk)
                if self._paused and self._buffered < LOW_WATER and self.transport is not None:
                    self._paused = False
                    self.transport.resume_reading()
                yield chunk
            elif self.complete:
                return
            elif self.broke is not None:
                raise self.broke
            else:
                self._waiter = self._loop.create_future()
                await self._waiter

    def close(self) -> None:
        self._on_lost = None  # closed by the pool's own decision
        if self.transport is not None and not self.closed:
            self.transport.close()
        self.closed = True

    def _ended(self) -> None:
        self.complete = True
        self._wake()

    def _fail(self, error: UpstreamError) -> None:
        if not self.head.done():
            if self._sent:
                self.head.set_exception(error)
            else:  # closed unused (a spare): an error nobody reads would be logged as such
                self.head.cancel()
        self.broke = self.broke or error
        self._wake()

    def _wake(self) -> None:
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_result(None)
