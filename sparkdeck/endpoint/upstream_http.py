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
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import aiohttp

CONNECT_TIMEOUT_S = 5.0  # no read timeout: a long prefill sends nothing for minutes
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


class UpstreamPool:
    """One aiohttp session (its connection pool) for every forwarded request."""

    def __init__(self) -> None:
        self._session: aiohttp.ClientSession | None = None

    def _open(self) -> aiohttp.ClientSession:
        import aiohttp

        if self._session is None:
            self._session = aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(limit=0),  # no cap below what 32+ streams need
                timeout=aiohttp.ClientTimeout(total=None, connect=CONNECT_TIMEOUT_S),
                cookie_jar=aiohttp.DummyCookieJar(), skip_auto_headers=_AUTO_HEADERS,
                auto_decompress=False)
        return self._session

    async def send(self, method: str, url: str, headers: list[tuple[bytes, bytes]],
                   body: bytes | bytearray) -> UpstreamAnswer:
        """Send a request as given; the answer once its headers are in (UpstreamError when
        the engine does not answer)."""
        import aiohttp

        session = self._open()
        pairs = [(k.decode("latin-1"), v.decode("latin-1")) for k, v in headers]
        try:
            response = await session.request(method, url, headers=pairs, data=body,
                                             allow_redirects=False)
        except (TimeoutError, aiohttp.ClientError) as exc:
            raise UpstreamError(type(exc).__name__) from exc
        return UpstreamAnswer(response)

    async def get_json(self, url: str) -> Any:
        """GET `url` and decode its JSON (UpstreamError or ValueError when it cannot)."""
        import aiohttp

        try:
            async with self._open().get(
                    url, timeout=aiohttp.ClientTimeout(total=MODELS_TIMEOUT_S)) as response:
                return await response.json(content_type=None)
        except (TimeoutError, aiohttp.ClientError) as exc:
            raise UpstreamError(type(exc).__name__) from exc

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
