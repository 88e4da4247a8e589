"""Streaming chat over an engine's OpenAI API: the request builder, the stream, typed errors.

`ChatClient.stream(request)` returns a `ChatStream`: iterate it (a plain synchronous
generator) for `Timed(at, delta)` pairs, where `at` is the `time.perf_counter()` taken as
that SSE event was parsed, so TTFT and decode rates can be measured by callers (the chat
pane, the benchmark). `ChatStream.cancel()` may be called from any thread: it shuts the
socket down, which both wakes a reader blocked in `recv` and tells the server the client
left, so vLLM and llama.cpp abort the request instead of generating into the void.

The event stream is parsed by httpx-sse; this module only decides what each event means.
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
from httpx_sse import SSEError, connect_sse

from sparkdeck.chat.deltas import Delta, Done, Opened, error_in, parse_chunk

DEFAULT_TIMEOUT = httpx.Timeout(connect=5.0, read=300.0, write=30.0, pool=5.0)
_SNIPPET = 300


class ChatError(Exception):
    """Base of every chat failure; the message is fit to show a user as is."""


class ServerUnreachable(ChatError):
    """Nothing answered (refused, DNS, connect timeout) or the connection broke mid-reply."""


class HTTPErrorReply(ChatError):
    """The server refused the request with an HTTP error; `server_message` is its own words."""

    def __init__(self, status: int, server_message: str, url: str):
        self.status, self.server_message, self.url = status, server_message, url
        super().__init__(f"HTTP {status} from {url}: {server_message}")


class StreamErrorEvent(ChatError):
    """The server reported an error inside the event stream (after HTTP 200)."""

    def __init__(self, server_message: str, code: Any = None):
        self.server_message, self.code = server_message, code
        suffix = f" (code {code})" if code not in (None, "") else ""
        super().__init__(f"the server stopped the reply: {server_message}{suffix}")


class ProtocolError(ChatError):
    """The server answered, but not with an OpenAI chat event stream."""


class Timed(NamedTuple):
    """A delta and the perf_counter() at which the SSE event carrying it was parsed."""

    at: float
    delta: Delta


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
        body: dict[str, Any] = {"model": chosen, "messages": [dict(m) for m in self.messages],
                                "stream": True}
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


def _server_message(response: httpx.Response) -> str:
    text = response.text
    try:
        found = error_in(json.loads(text))
    except ValueError:
        found = None
    if found:
        return found[0]
    return text.strip()[:_SNIPPET] or response.reason_phrase or "no message"


class ChatStream:
    """One streaming reply. Iterate once; `cancel()` from any thread; `close()` when done.

    Iteration ends after `Done`, when the server closes the stream, or quietly after a
    cancel (`cancelled` is then True). Failures raise a `ChatError` subclass.
    """

    def __init__(self, client: httpx.Client, url: str, body: dict[str, Any],
                 headers: Mapping[str, str]):
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
        with self._lock:
            response = self._response
        if response is None:
            return  # not connected yet: the reader checks the flag once it is
        stream = response.extensions.get("network_stream")
        sock = stream.get_extra_info("socket") if stream is not None else None
        if isinstance(sock, socket.socket):
            try:
                # shutdown, not close: close() would leave a recv() in another thread blocked
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass  # already closed by the other side

    def __iter__(self) -> Iterator[Timed]:
        self.started_at = time.perf_counter()
        try:
            yield from self._events()
        except httpx.TimeoutException as exc:
            if not self.cancelled:
                raise ServerUnreachable(f"{self.url}: no answer in time ({type(exc).__name__})"
                                        ) from exc
        except httpx.TransportError as exc:
            if self.cancelled:
                return
            if self._response is None:
                raise ServerUnreachable(f"nothing answers at {self.url} ({exc}): is the engine "
                                        "running?") from exc
            raise ServerUnreachable(f"{self.url}: the connection broke mid-reply ({exc})"
                                    ) from exc

    def _events(self) -> Iterator[Timed]:
        with connect_sse(self._client, "POST", self.url, json=self.body,
                         headers=dict(self._headers)) as source:
            response = source.response
            opened_at = time.perf_counter()
            with self._lock:
                self._response = response
            if self.cancelled:
                return
            if response.status_code >= 400:
                response.read()
                raise HTTPErrorReply(response.status_code, _server_message(response), self.url)
            yield Timed(opened_at, Opened(response.status_code))
            try:
                for event in source.iter_sse():
                    at = time.perf_counter()
                    if self.cancelled:
                        return
                    if event.data == "[DONE]":
                        self.finished_normally = True
                        yield Timed(at, Done())
                        return
                    for delta in self._decode(event.event, event.data):
                        yield Timed(at, delta)
            except SSEError as exc:
                response.read()
                raise ProtocolError(f"{self.url} answered HTTP {response.status_code} but not "
                                    f"with an event stream: {_server_message(response)}"
                                    ) from exc

    @staticmethod
    def _decode(event: str, data: str) -> list[Delta]:
        if not data.strip():
            return []
        try:
            payload = json.loads(data)
        except ValueError as exc:
            if event == "error":  # an error event may carry plain text
                raise StreamErrorEvent(data.strip()[:_SNIPPET]) from exc
            raise ProtocolError(f"undecodable event from the server: {data[:_SNIPPET]!r}"
                                ) from exc
        error = error_in(payload)
        if error is not None or event == "error":
            message, code = error or (data[:_SNIPPET], None)
            raise StreamErrorEvent(message, code)
        return parse_chunk(payload) if isinstance(payload, Mapping) else []


class ChatClient:
    """An engine's OpenAI API at `base_url` (without /v1). Close it, or use it as a context."""

    def __init__(self, base_url: str, *, api_key: str | None = None,
                 timeout: httpx.Timeout | float = DEFAULT_TIMEOUT,
                 transport: httpx.BaseTransport | None = None):
        self.base_url = base_url.rstrip("/")
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._http = httpx.Client(timeout=timeout, headers=headers, transport=transport)

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
            response = self._http.get(url)
        except httpx.TransportError as exc:
            raise ServerUnreachable(f"nothing answers at {url} ({exc}): is the engine "
                                    "running?") from exc
        if response.status_code >= 400:
            raise HTTPErrorReply(response.status_code, _server_message(response), url)
        try:
            data = response.json().get("data", [])
            return tuple(str(m["id"]) for m in data if isinstance(m, Mapping) and "id" in m)
        except (ValueError, AttributeError, TypeError) as exc:
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
        return ChatStream(self._http, self.base_url + "/v1/chat/completions",
                          request.body(model), {})


def stream_chat(base_url: str, request: ChatRequest, *, api_key: str | None = None,
                timeout: httpx.Timeout | float = DEFAULT_TIMEOUT) -> Iterator[Timed]:
    """One reply as a generator of `Timed` deltas; closing the generator aborts the request."""
    with ChatClient(base_url, api_key=api_key, timeout=timeout) as client:
        with client.stream(request) as stream:
            yield from stream
