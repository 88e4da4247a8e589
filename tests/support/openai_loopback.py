"""A real HTTP server on 127.0.0.1 that answers like an OpenAI-compatible engine, from a script.

Tests queue `Scripted` answers; each POST to /v1/chat/completions takes the next one and
streams its body in the given pieces (with pauses between them), so the client under test
talks real HTTP/1.1 over a real socket. `disconnected` is set when the client goes away in
the middle of a reply: what a server's abort-on-disconnect reacts to.
"""

from __future__ import annotations

import json
import queue
import socket
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import ThreadingHTTPServer
from typing import Any

from sparkdeck.endpoints import AttachedRegistry, Endpoint
from tests.support.http_json import JsonReplies


@dataclass
class Scripted:
    """One answer: status, content type, body pieces, a pause before each piece."""

    pieces: list[bytes] = field(default_factory=list)
    status: int = 200
    content_type: str = "text/event-stream"
    pause: float = 0.0
    # keep sending this piece every `pause` seconds after `pieces` until the client leaves
    repeat_forever: bytes | None = None


def sse_events(body: str) -> list[bytes]:
    """Split a recorded SSE body into its events, each sent as one piece."""
    return [(event + "\n\n").encode() for event in body.split("\n\n") if event.strip()]


def chunk_event(content: str) -> bytes:
    data = {
        "object": "chat.completion.chunk",
        "choices": [{"index": 0, "delta": {"content": content}, "finish_reason": None}],
    }
    return f"data: {json.dumps(data)}\n\n".encode()


class _Handler(JsonReplies):
    protocol_version = "HTTP/1.1"
    server: _Server

    def log_message(self, format: str, *args: Any) -> None:  # keep test output clean
        pass

    def do_GET(self) -> None:  # noqa: N802 (the library's own name)
        if self.path == "/v1/models":
            self._json(
                200,
                {
                    "object": "list",
                    "data": [{"id": m, "object": "model"} for m in self.server.models],
                },
            )
        else:
            self._json(404, {"error": {"message": f"no route {self.path}", "code": 404}})

    def do_POST(self) -> None:  # noqa: N802 (the library's own name)
        length = int(self.headers.get("Content-Length", 0))
        body = json.loads(self.rfile.read(length) or b"{}")
        self.server.requests.put(
            {"path": self.path, "body": body, "authorization": self.headers.get("Authorization")}
        )
        try:
            answer = self.server.script.get_nowait()
        except queue.Empty:
            self._json(500, {"error": {"message": "loopback server: nothing scripted"}})
            return
        # as engines do: without it Nagle holds each piece until the client's delayed ACK
        # (40 ms), and pieces sent apart arrive together
        self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.send_response(answer.status)
        self.send_header("Content-Type", answer.content_type)
        self.send_header("Connection", "close")
        self.end_headers()
        self.close_connection = True
        try:
            for piece in self._pieces(answer):
                if answer.pause:
                    time.sleep(answer.pause)
                self.wfile.write(piece)
                self.wfile.flush()
        except (BrokenPipeError, ConnectionResetError):
            self.server.disconnected.set()

    @staticmethod
    def _pieces(answer: Scripted) -> Iterator[bytes]:
        yield from answer.pieces
        while answer.repeat_forever is not None:
            yield answer.repeat_forever


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, models: tuple[str, ...]):
        super().__init__(("127.0.0.1", 0), _Handler)
        self.models = models
        self.script: queue.Queue[Scripted] = queue.Queue()
        self.requests: queue.Queue[dict[str, Any]] = queue.Queue()
        self.disconnected = threading.Event()


class LoopbackOpenAI:
    """Start with `with LoopbackOpenAI() as server:`; `server.url` is its base URL."""

    def __init__(self, models: tuple[str, ...] = ("loopback-model",)):
        self._server = _Server(models)
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    def __enter__(self) -> LoopbackOpenAI:
        self._thread.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._server.shutdown()
        self._server.server_close()

    def answer(self, scripted: Scripted) -> None:
        self._server.script.put(scripted)

    def next_request(self, timeout: float = 5.0) -> dict[str, Any]:
        return self._server.requests.get(timeout=timeout)

    @property
    def disconnected(self) -> threading.Event:
        return self._server.disconnected


def attach(url: str) -> None:
    AttachedRegistry().add(Endpoint("atlas", url, "openai", "/v1/models", None, "attached"))
