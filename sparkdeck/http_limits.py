"""Every HTTP body sparkdeck reads has a ceiling.

A server can answer with a body that never ends (an endless /metrics grew `status
--endpoint` to 412 MB in 60 s) or with one far larger than anything it should send; the read
timeout does not help, since bytes keep coming. Clients made here wrap each response's byte
stream as soon as its headers arrive (an httpx response hook, which runs before `get()` reads
the body), so reading past the limit raises `BodyTooLarge` instead of growing memory.
`BodyTooLarge` is an `httpx.TransportError`: every caller that already handles a broken
connection handles it, and its message says what happened.

Compression is refused (`Accept-Encoding: identity`), so the bytes counted are the bytes kept.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import httpx

# A JSON answer (health, model list, version, token count) is a few kB; 8 MiB is generous.
MAX_BODY = 8 * 1024 * 1024


class BodyTooLarge(httpx.TransportError):
    """The server sent more than the limit for one body; reading stopped there."""


def describe_limit(limit: int) -> str:
    return f"{limit / (1024 * 1024):g} MiB" if limit >= 1024 * 1024 else f"{limit} bytes"


class _CappedStream(httpx.SyncByteStream):
    def __init__(self, inner: httpx.SyncByteStream, limit: int, request: httpx.Request):
        self._inner, self._limit, self._request = inner, limit, request

    def __iter__(self) -> Iterator[bytes]:
        seen = 0
        for chunk in self._inner:
            seen += len(chunk)
            if seen > self._limit:
                raise BodyTooLarge(
                    f"{self._request.url} sent more than "
                    f"{describe_limit(self._limit)} in one answer; sparkdeck "
                    "stopped reading it",
                    request=self._request,
                )
            yield chunk

    def close(self) -> None:
        self._inner.close()


def cap_bodies(limit: int) -> Callable[[httpx.Response], None]:
    """A response hook that puts a `limit`-byte ceiling on each body the client reads."""

    def hook(response: httpx.Response) -> None:
        if isinstance(response.stream, httpx.SyncByteStream):
            response.stream = _CappedStream(response.stream, limit, response.request)

    return hook


def capped_client(limit: int = MAX_BODY, **kwargs: Any) -> httpx.Client:
    """An httpx.Client whose every body is read through a `limit`-byte ceiling."""
    hooks = dict(kwargs.pop("event_hooks", None) or {})
    hooks["response"] = [*hooks.get("response", []), cap_bodies(limit)]
    headers = httpx.Headers(kwargs.pop("headers", None) or {})
    headers.setdefault("Accept-Encoding", "identity")
    return httpx.Client(event_hooks=hooks, headers=headers, **kwargs)


def read_head(response: httpx.Response, limit: int) -> bytes:
    """At most the first `limit` bytes of a streamed response's body; the rest is left
    unread (closing the response drops the connection). For a probe that needs only the
    start of whatever the server sends."""
    head = bytearray()
    for chunk in response.iter_bytes():
        head += chunk
        if len(head) >= limit:
            break
    return bytes(head[:limit])


def get_capped(url: str, *, timeout: float, limit: int = MAX_BODY) -> httpx.Response:
    """`httpx.get` with a ceiling on the body (raises httpx errors, BodyTooLarge among them)."""
    with capped_client(limit, timeout=timeout) as client:
        return client.get(url)
