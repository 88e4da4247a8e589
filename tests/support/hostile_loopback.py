"""A loopback HTTP server that answers each request with whatever the test set last: any
status, any headers, any bytes, split anywhere, optionally repeated forever.

For generated-input tests (hypothesis): one server for a whole run, many requests, so the
client under test meets bad answers over a real socket without a server start per example.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass(frozen=True)
class Answer:
    """One reply: status line, headers, body pieces (each written and flushed on its own),
    then `forever` written again and again until the client goes away."""

    status: int = 200
    headers: tuple[tuple[str, str], ...] = (("Content-Type", "text/event-stream"),)
    pieces: tuple[bytes, ...] = ()
    forever: bytes | None = None
    extra: dict[str, Any] = field(default_factory=dict)


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _Server

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def _answer(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        if length:
            self.rfile.read(length)
        answer = self.server.routes.get(self.path.split("?")[0], self.server.current)
        self.server.served += 1
        self.send_response(answer.status)
        for name, value in answer.headers:
            self.send_header(name, value)
        self.send_header("Connection", "close")
        self.end_headers()
        self.close_connection = True
        try:
            for piece in answer.pieces:
                self.wfile.write(piece)
                self.wfile.flush()
            while answer.forever is not None:
                self.wfile.write(answer.forever)
        except OSError:  # the client left: what a client with limits does
            self.server.client_left += 1

    do_GET = do_POST = _answer


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.current = Answer()
        self.routes: dict[str, Answer] = {}  # path -> answer, over `current`
        self.served = 0
        self.client_left = 0


class HostileServer:
    """`with HostileServer() as server:`; set `server.answer = Answer(...)` before a request."""

    def __init__(self) -> None:
        self._server = _Server()
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"
        self._thread = threading.Thread(
            target=self._server.serve_forever, daemon=True, name="hostile-loopback"
        )

    def __enter__(self) -> HostileServer:
        self._thread.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._server.shutdown()
        self._server.server_close()

    @property
    def answer(self) -> Answer:
        return self._server.current

    @answer.setter
    def answer(self, value: Answer) -> None:
        self._server.current = value

    def route(self, path: str, answer: Answer) -> None:
        """Answer requests for `path` with `answer` (others still get `answer`)."""
        self._server.routes[path] = answer

    @property
    def served(self) -> int:
        return self._server.served
