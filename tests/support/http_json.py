"""The one JSON answer the loopback test servers all write (http.server handlers)."""

from __future__ import annotations

import json
from http.server import BaseHTTPRequestHandler
from typing import Any


class JsonReplies(BaseHTTPRequestHandler):
    """Adds `_json(status, payload)`: a complete JSON response with its length."""

    def _json(self, status: int, payload: Any) -> None:
        body = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
