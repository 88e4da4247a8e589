"""The endpoint's HTTP connection to the engine: aiohttp's client, set up as a proxy needs it.

Why aiohttp here when the rest of sparkdeck speaks httpx: on the 2-core test machine a
minimal forwarder through aiohttp's client added 1.2-1.4 ms to a stream's first token, and
the same forwarder through httpx's transport 2.2-2.4 ms (docs/performance.md, 2026-12-02):
aiohttp parses the engine's answer in C. It is already installed with textual-serve.

What a client adds to a request on its own is switched off, so the engine gets what the
caller sent: no default User-Agent, Accept, Accept-Encoding or Content-Type; no cookie jar
(one caller's cookie would go with the next caller's request); no redirects; and answers
pass through compressed as they came. The session is made with the first request, in the
loop that serves it: an idle service never loads aiohttp.

Kept-alive connections and what engines do with them (measured on llama-server b11434,
2026-12-03): it closes a connection idle for 5 s (its `Keep-Alive: timeout=5`), after 100
requests (with `Connection: close`), and right after every streamed (chunked) answer
although that answer said `Keep-Alive`. A pooled connection can so be closed by the engine
just as the pool hands it to the next request: 50 concurrent streams through the endpoint
got 20-54 of 500 requests a 502 (ServerDisconnectedError, ClientOSError) that the engine
never sent. So: a request whose pooled connection the engine closed before the answer's
status and headers came back is sent once more, on a new connection (nothing had gone to
the caller yet; once the answer began, nothing is ever sent twice); and the pool lets an
idle connection go after KEEPALIVE_S, before the engine's own 5 s.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import aiohttp

CONNECT_TIMEOUT_S = 5.0  # no read timeout: a long prefill sends nothing for minutes
KEEPALIVE_S = 4.0  # below llama-server's 5 s idle close (uvicorn's own default is 5 s too)
MODELS_TIMEOUT_S = 5.0
_AUTO_HEADERS = ("User-Agent", "Accept", "Accept-Encoding", "Content-Type")


class UpstreamError(Exception):
    """The engine did not answer (refused, reset, timed out): `kind` names the failure."""

    def __init__(self, kind: str) -> None:
        super().__init__(kind)
        self.kind = kind


class UpstreamAnswer:
    """The engine's answer while it streams: status, raw headers and the body's bytes."""

    def __init__(self, response: aiohttp.ClientResponse) -> None:
        self._response = response
        self.status_code = response.status
        self.raw_headers: list[tuple[bytes, bytes]] = list(response.raw_headers)
        self.content_encoding = response.headers.get("Content-Encoding")

    async def aiter_raw(self) -> AsyncIterator[bytes]:
        """The body as it arrives (still compressed if it was)."""
        import aiohttp

        try:
            async for chunk in self._response.content.iter_any():
                yield chunk
        except aiohttp.ClientError as exc:
            raise UpstreamError(type(exc).__name__) from exc

    async def aread(self) -> bytes:
        return b"".join([chunk async for chunk in self.aiter_raw()])

    def close(self) -> None:
        """After a whole answer the connection goes back to the pool; mid-body it is closed,
        which is how an engine learns that the client went away and aborts the request."""
        if self._response.content.at_eof():
            self._response.release()
        else:
            self._response.close()


class _Attempt:
    """One try of a request: whether the pool gave it a connection it had used before."""

    __slots__ = ("reused",)

    def __init__(self) -> None:
        self.reused = False


class UpstreamPool:
    """One aiohttp session (its connection pool) for every forwarded request, and one of
    new connections only, for the second try of a request whose pooled connection the
    engine had closed."""

    def __init__(self) -> None:
        self._session: aiohttp.ClientSession | None = None
        self._fresh: aiohttp.ClientSession | None = None
        self.retried = 0  # requests sent again on a new connection (benchmarks report it)
        # requests the engine did not answer: the finder looks for the engine again after
        # one (endpoint/upstream.py), having trusted what it found until then
        self.failures = 0

    def _open(self) -> aiohttp.ClientSession:
        if self._session is None:
            self._session = _session(
                _reuse_traced(), keepalive_timeout=KEEPALIVE_S, limit=0
            )  # no cap below what 32+ streams need
        return self._session

    def _open_fresh(self) -> aiohttp.ClientSession:
        if self._fresh is None:
            self._fresh = _session(None, force_close=True, limit=0)
        return self._fresh

    async def send(
        self, method: str, url: str, headers: list[tuple[bytes, bytes]], body: bytes | bytearray
    ) -> UpstreamAnswer:
        """Send a request as given; the answer once its headers are in (UpstreamError when
        the engine does not answer). A pooled connection the engine closed before the
        answer began is no answer: the request goes again, once, on a new connection."""
        import aiohttp

        pairs = [(k.decode("latin-1"), v.decode("latin-1")) for k, v in headers]
        attempt = _Attempt()
        try:
            try:
                response = await self._open().request(
                    method,
                    url,
                    headers=pairs,
                    data=body,
                    allow_redirects=False,
                    trace_request_ctx=attempt,
                )
            except (aiohttp.ServerDisconnectedError, aiohttp.ClientOSError):
                # a refused or failed connect (ClientConnectorError) is never a reused
                # connection: only a connection the engine closed under us is tried again
                if not attempt.reused:
                    raise
                self.retried += 1
                response = await self._open_fresh().request(
                    method, url, headers=pairs, data=body, allow_redirects=False
                )
        except (TimeoutError, aiohttp.ClientError) as exc:
            self.failures += 1
            raise UpstreamError(type(exc).__name__) from exc
        return UpstreamAnswer(response)

    async def get_json(self, url: str) -> Any:
        """GET `url` and decode its JSON (UpstreamError or ValueError when it cannot).
        aiohttp itself sends a GET again when its reused connection was closed."""
        import aiohttp

        try:
            async with self._open().get(
                url, timeout=aiohttp.ClientTimeout(total=MODELS_TIMEOUT_S)
            ) as response:
                return await response.json(content_type=None)
        except (TimeoutError, aiohttp.ClientError) as exc:
            raise UpstreamError(type(exc).__name__) from exc

    async def close(self) -> None:
        for session in (self._session, self._fresh):
            if session is not None:
                await session.close()


def _session(traces: aiohttp.TraceConfig | None, **connector: Any) -> aiohttp.ClientSession:
    import aiohttp

    return aiohttp.ClientSession(
        connector=aiohttp.TCPConnector(**connector),
        timeout=aiohttp.ClientTimeout(total=None, connect=CONNECT_TIMEOUT_S),
        cookie_jar=aiohttp.DummyCookieJar(),
        skip_auto_headers=_AUTO_HEADERS,
        auto_decompress=False,
        trace_configs=[traces] if traces is not None else None,
    )


def _reuse_traced() -> aiohttp.TraceConfig:
    """aiohttp's hook that says a request got a pooled connection: marks its _Attempt."""
    import aiohttp

    async def reused(_session: Any, context: Any, _params: Any) -> None:
        if isinstance(context.trace_request_ctx, _Attempt):
            context.trace_request_ctx.reused = True

    traces = aiohttp.TraceConfig()
    traces.on_connection_reuseconn.append(reused)
    return traces
