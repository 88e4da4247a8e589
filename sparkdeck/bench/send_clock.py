"""When a request really left: an httpx transport that notes the moment its bytes went out.

TTFT runs from "request sent". Reading the clock before calling the client also counts the
client's own work (encoding a long prompt as JSON, taking a pooled connection), which on a
busy machine is milliseconds. httpcore reports `send_request_headers.started` through its
trace extension just before the first byte is written to the socket; this transport turns
that on for every request and keeps the time per thread, since each benchmark request runs
in a thread of its own.
"""

from __future__ import annotations

import threading
import time
from typing import Any

import httpx

_SENT_EVENTS = ("http11.send_request_headers.started", "http2.send_request_headers.started")


class SendClockTransport(httpx.HTTPTransport):
    """An HTTPTransport that records, per thread, when the last request started sending."""

    def __init__(self, **kwargs: Any):
        super().__init__(**kwargs)
        self._local = threading.local()

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        local = self._local

        def trace(name: str, info: Any) -> None:
            if name in _SENT_EVENTS:
                local.sent_at = time.perf_counter()

        request.extensions["trace"] = trace
        return super().handle_request(request)

    def reset(self) -> None:
        self._local.sent_at = None

    def sent_at(self) -> float | None:
        """The send time of this thread's latest request since `reset()`, if it got that far."""
        return getattr(self._local, "sent_at", None)
