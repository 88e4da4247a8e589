"""Streaming chat over an engine's OpenAI API: the request builder and the stream (its typed
errors are sparkdeck.chat.errors').

`ChatClient.stream(request)` returns a `ChatStream`: iterate it (a plain synchronous
generator) for `Timed(at, delta)` pairs, where `at` is the `time.perf_counter()` at which
the bytes that completed that SSE event came off the socket, so TTFT and decode rates can be
measured by callers (the chat pane, the benchmark). The body is read on a thread of its own
that does nothing else: the thread that parses, saves and shows the reply gets the CPU in
bursts on a busy machine (the TUI's worker shares the GIL with the screen), and events
stamped there came out up to 19x too fast. `ChatStream.cancel()` may be called from any
thread: it shuts the socket down, which both wakes the reader blocked in `recv` and tells the
server the client left, so vLLM and llama.cpp abort the request instead of generating into
the void.
"""

from __future__ import annotations

import json
import os
import socket
import threading
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import httpx
from httpx_sse import EventSource

from sparkdeck.chat.arrivals import tap
from sparkdeck.chat.deltas import Delta, Done, Opened, error_in, parse_chunk
from sparkdeck.chat.errors import (
    EngineNotAnswering,
    HTTPErrorReply,
    ProtocolError,
    ServerUnreachable,
    StreamErrorEvent,
    server_message,
)
from sparkdeck.http_limits import BodyTooLarge, capped_client
from sparkdeck.text_safety import excerpt

LOOKUP_TIMEOUT_S = 5.0
"""Connect and read bound of the short look-ups a user waits on (/v1/models): an engine that
is up answers them in milliseconds; a hung one (SIGSTOPped, wedged) is reported after this."""
STREAM_INACTIVITY_S = 180.0
"""The longest silence a streamed reply may have before it counts as "not answering": a long
prompt's prefill sends nothing until its first token, and on a big dense model that can
rightly take minutes; between tokens the gap is milliseconds."""
DEFAULT_TIMEOUT = httpx.Timeout(
    connect=LOOKUP_TIMEOUT_S, read=STREAM_INACTIVITY_S, write=30.0, pool=LOOKUP_TIMEOUT_S
)
_SNIPPET = 300
# A streamed reply larger than this is a server gone wrong (100k tokens of SSE chunks are
# ~30 MB): the client stops reading there with BodyTooLarge (reported as ProtocolError).
MAX_REPLY_BYTES = 256 * 1024 * 1024


class Timed(NamedTuple):
    """A delta and the perf_counter() at which the bytes completing its SSE event arrived."""

    at: float
    delta: Delta
    event: int = 0  # which SSE event of the stream carried it (1, 2, ...): events read
    # together share `at`, and one event may carry several deltas


def _merge(base: dict[str, Any], extra: Mapping[str, Any]) -> dict[str, Any]:
    """`extra` over `base`, merging nested objects (so extra stream_options keep include_usage)."""
    merged = dict(base)
    for key, value in extra.items():
        if isinstance(value, Mapping) and isinstance(merged.get(key), Mapping):
            merged[key] = _merge(dict(merged[key]), value)
        else:
            merged[key] = value
    return merged


@dataclass(frozen=True)
class ChatRequest:
    """One streamed /v1/chat/completions call.

    `extra` holds any further body fields (thinking switches, `ignore_eos`, `min_tokens`,
    `stream_options.continuous_usage_stats`, ...); nested objects merge with what the fields
    above produce, and an `extra` value wins over them.
    """

    messages: Sequence[Mapping[str, Any]]
    model: str | None = None
    max_tokens: int | None = None
    temperature: float | None = None
    include_usage: bool = True
    extra: Mapping[str, Any] = field(default_factory=dict)

    def body(self, model: str | None = None) -> dict[str, Any]:
        chosen = self.model or model
        if not chosen:
            raise ValueError("a chat request needs a model name")
        body: dict[str, Any] = {
            "model": chosen,
            "messages": [dict(m) for m in self.messages],
            "stream": True,
        }
        if self.max_tokens is not None:
            body["max_tokens"] = self.max_tokens
        if self.temperature is not None:
            body["temperature"] = self.temperature
        if self.include_usage:
            body["stream_options"] = {"include_usage": True}
        return _merge(body, self.extra)


def api_key_from_env(names: Iterable[str]) -> str | None:
    """The first non-empty environment variable among `names` (keys never live in files)."""
    for name in names:
        value = os.environ.get(name, "").strip()
        if value:
            return value
    return None


class ChatStream:
    """One streaming reply. Iterate once; `cancel()` from any thread; `close()` when done.

    Iteration ends after `Done`, when the server closes the stream, or quietly after a
    cancel (`cancelled` is then True). Failures raise a `ChatError` subclass.
    """

    def __init__(
        self, client: httpx.Client, url: str, body: dict[str, Any], headers: Mapping[str, str]
    ):
        self._client, self.url, self.body, self._headers = client, url, body, dict(headers)
        self._cancel = threading.Event()
        self._response: httpx.Response | None = None
        self._lock = threading.Lock()
        self.started_at: float | None = None
        self.finished_normally = False

    @property
    def cancelled(self) -> bool:
        return self._cancel.is_set()

    def __enter__(self) -> ChatStream:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def close(self) -> None:
        """Stop reading; an unfinished response is dropped with its connection."""
        with self._lock:
            response = self._response
        if response is not None:
            response.close()

    def cancel(self) -> None:
        """Stop the reply now, from any thread: the server sees the client go away."""
        self._cancel.set()
        self._shutdown()  # not connected yet: the reader checks the flag once it is

    def __iter__(self) -> Iterator[Timed]:
        self.started_at = time.perf_counter()
        try:
            yield from self._events()
        except httpx.TimeoutException as exc:
            if not self.cancelled:
                seconds = self._client.timeout.read or STREAM_INACTIVITY_S
                raise EngineNotAnswering(self.url, seconds) from exc
        except BodyTooLarge as exc:
            raise ProtocolError(str(exc)) from exc
        except httpx.TransportError as exc:
            if self.cancelled:
                return
            if self._response is None:
                raise ServerUnreachable(
                    f"nothing answers at {self.url} ({exc}): is the engine running?"
                ) from exc
            raise ServerUnreachable(
                f"{self.url}: the connection broke mid-reply ({excerpt(str(exc), 200)})"
            ) from exc
        except (httpx.HTTPError, httpx.InvalidURL) as exc:
            # e.g. a body in an encoding it announced falsely; or a redirect whose Location is
            # no URL at all: httpx parses it (InvalidURL, not an HTTPError) even when it does
            # not follow it
            if not self.cancelled:
                raise ProtocolError(
                    f"{self.url}: unreadable answer ({type(exc).__name__}: "
                    f"{excerpt(str(exc), 200)})"
                ) from exc

    def _shutdown(self) -> None:
        """Shut the response's socket: a reader blocked in recv() wakes and the server sees
        the client leave."""
        with self._lock:
            response = self._response
        stream = response.extensions.get("network_stream") if response is not None else None
        sock = stream.get_extra_info("socket") if stream is not None else None
        if isinstance(sock, socket.socket):
            try:
                # shutdown, not close: close() would leave a recv() in another thread blocked
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass  # already closed by the other side

    def _events(self) -> Iterator[Timed]:
        headers = {"Accept": "text/event-stream", "Cache-Control": "no-store", **self._headers}
        with self._client.stream("POST", self.url, json=self.body, headers=headers) as response:
            opened_at = time.perf_counter()
            with self._lock:
                self._response = response
            if self.cancelled:
                return
            if response.status_code >= 400:
                raise HTTPErrorReply(response.status_code, server_message(response), self.url)
            if response.status_code >= 300:  # httpx does not follow it: a POST must not move
                where = excerpt(response.headers.get("location", "nowhere said"), 200)
                raise HTTPErrorReply(
                    response.status_code,
                    f"redirects to {where}; pass that URL as the endpoint if it is the engine",
                    self.url,
                )
            if "text/event-stream" not in response.headers.get("content-type", ""):
                raise ProtocolError(
                    f"{self.url} answered HTTP {response.status_code} but not "
                    "with an event stream: "
                    f"{server_message(response)}"
                )
            yield Timed(opened_at, Opened(response.status_code))
            tapped = tap(response, opened_at)
            try:
                # httpx-sse parses the stream lazily: an event is yielded as soon as the chunk
                # that completes it has been read, before the next chunk is asked for, so the
                # tap's stamp at that moment is the arrival of the event's last bytes.
                for number, sse in enumerate(EventSource(response).iter_sse(), start=1):
                    at = tapped.arrived_at if tapped is not None else time.perf_counter()
                    if self.cancelled:
                        return
                    if sse.data == "[DONE]":
                        self.finished_normally = True
                        yield Timed(at, Done(), number)
                        return
                    for delta in self._decode(sse.event, sse.data):
                        yield Timed(at, delta, number)
                    if self.cancelled:
                        return
            finally:
                if tapped is not None:
                    tapped.close()

    @staticmethod
    def _decode(event: str, data: str) -> list[Delta]:
        if not data.strip():
            return []
        try:
            payload = json.loads(data)
        except (ValueError, RecursionError) as exc:  # RecursionError: nested 1,000+ deep
            if event == "error":  # an error event may carry plain text
                raise StreamErrorEvent(excerpt(data, _SNIPPET)) from exc
            raise ProtocolError(
                f"undecodable event from the server: {excerpt(data, 120)!r}"
            ) from exc
        error = error_in(payload)
        if error is not None or event == "error":
            message, code = error or (excerpt(data, _SNIPPET), None)
            raise StreamErrorEvent(message, code)
        return parse_chunk(payload) if isinstance(payload, Mapping) else []


class ChatClient:
    """An engine's OpenAI API at `base_url` (without /v1). Close it, or use it as a context."""

    def __init__(
        self,
        base_url: str,
        *,
        api_key: str | None = None,
        timeout: httpx.Timeout | float = DEFAULT_TIMEOUT,
        transport: httpx.BaseTransport | None = None,
        max_reply_bytes: int = MAX_REPLY_BYTES,
    ):
        self.base_url = base_url.rstrip("/")
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._http = capped_client(
            max_reply_bytes, timeout=timeout, headers=headers, transport=transport
        )

    def __enter__(self) -> ChatClient:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def close(self) -> None:
        self._http.close()

    def models(self) -> tuple[str, ...]:
        """Model ids from /v1/models, in the server's order."""
        url = self.base_url + "/v1/models"
        try:
            with self._http.stream("GET", url, timeout=LOOKUP_TIMEOUT_S) as response:
                if response.status_code >= 400:
                    raise HTTPErrorReply(response.status_code, server_message(response), url)
                response.read()
        except BodyTooLarge as exc:
            raise ProtocolError(str(exc)) from exc
        except (httpx.ReadTimeout, httpx.WriteTimeout) as exc:  # connected, then silence
            raise EngineNotAnswering(url, LOOKUP_TIMEOUT_S) from exc
        except httpx.TransportError as exc:
            raise ServerUnreachable(
                f"nothing answers at {url} ({excerpt(str(exc), 200)}): is the engine running?"
            ) from exc
        except (httpx.HTTPError, httpx.InvalidURL) as exc:  # InvalidURL: a bad redirect
            raise ProtocolError(f"{url}: unreadable answer ({type(exc).__name__})") from exc
        try:
            data = response.json().get("data", [])
            return tuple(str(m["id"]) for m in data if isinstance(m, Mapping) and "id" in m)
        except (ValueError, AttributeError, TypeError, RecursionError) as exc:
            raise ProtocolError(f"{url} did not return an OpenAI model list") from exc

    def default_model(self) -> str:
        """The model to talk to when none is named: the first the server lists."""
        models = self.models()
        if not models:
            raise ProtocolError(f"{self.base_url}/v1/models lists no model yet; is it loaded?")
        return models[0]

    def stream(self, request: ChatRequest) -> ChatStream:
        """A reply stream for `request`; the model is looked up when the request names none."""
        model = request.model or self.default_model()
        return ChatStream(
            self._http, self.base_url + "/v1/chat/completions", request.body(model), {}
        )


def stream_chat(
    base_url: str,
    request: ChatRequest,
    *,
    api_key: str | None = None,
    timeout: httpx.Timeout | float = DEFAULT_TIMEOUT,
) -> Iterator[Timed]:
    """One reply as a generator of `Timed` deltas; closing the generator aborts the request."""
    with ChatClient(base_url, api_key=api_key, timeout=timeout) as client:
        with client.stream(request) as stream:
            yield from stream
