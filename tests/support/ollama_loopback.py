"""FAKE Ollama model store on loopback: /api/show and a streamed /api/pull.

The real ollama/ollama image cannot be pulled on these machines (no registry access), so the
pull protocol is played back here as Ollama's server writes it (server/routes.go PullHandler:
one JSON object per line, a "pulling <digest>" line per blob with total/completed, then
"verifying sha256 digest", "writing manifest", "success"; or {"error": ...}). What it cannot
show is a real download's timing and Ollama's own error wording beyond the examples used.
"""

from __future__ import annotations

import json
import threading
import time
from http.server import ThreadingHTTPServer
from typing import Any

from tests.support.http_json import JsonReplies

# As in a real manifest: the weights first (nearly all the bytes), then template and params.
BLOBS = {"sha256:aaa1": 4_000_000, "sha256:bbb2": 1_200, "sha256:ccc3": 90}


class _Handler(JsonReplies):
    protocol_version = "HTTP/1.1"
    server: FakeOllama

    def log_message(self, *args: Any) -> None:
        pass

    def _body(self) -> dict[str, Any]:
        return json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}")

    def do_POST(self) -> None:  # noqa: N802 (the library's own name)
        body = self._body()
        model = body.get("model", "")
        self.server.calls.append((self.path, model))
        if self.path == "/api/show":
            if model in self.server.models:
                self._json(200, {"modelfile": "FROM x", "details": {"format": "gguf"}})
            else:
                self._json(404, {"error": f"model '{model}' not found"})
            return
        if self.path != "/api/pull":
            self._json(404, {"error": "not found"})
            return
        self.send_response(200)
        self.send_header("Content-Type", "application/x-ndjson")
        self.send_header("Connection", "close")
        self.end_headers()
        self.close_connection = True
        for line in self.server.script(model):
            self.wfile.write(json.dumps(line).encode() + b"\n")
            self.wfile.flush()
            time.sleep(self.server.pause)
        if self.server.finish_pull and model not in self.server.unknown:
            self.server.models.add(model)


class FakeOllama(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(
        self,
        models: set[str] | None = None,
        unknown: set[str] | None = None,
        pause: float = 0.0,
        finish_pull: bool = True,
    ) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.models = set(models or ())
        self.unknown = set(unknown or ())  # names the "registry" does not have
        self.pause = pause
        self.finish_pull = finish_pull
        self.calls: list[tuple[str, str]] = []
        self.url = f"http://127.0.0.1:{self.server_address[1]}"
        self._thread = threading.Thread(target=self.serve_forever, daemon=True)

    def script(self, model: str) -> list[dict[str, Any]]:
        if model in self.unknown:
            return [
                {"status": "pulling manifest"},
                {"error": "pull model manifest: file does not exist"},
            ]
        lines: list[dict[str, Any]] = [{"status": "pulling manifest"}]
        for digest, total in BLOBS.items():
            for completed in (0, total // 2, total):
                lines.append(
                    {
                        "status": f"pulling {digest[7:]}",
                        "digest": digest,
                        "total": total,
                        "completed": completed,
                    }
                )
        lines += [{"status": "verifying sha256 digest"}, {"status": "writing manifest"}]
        if self.finish_pull:
            lines.append({"status": "success"})
        return lines

    def __enter__(self) -> FakeOllama:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.shutdown()
        self.server_close()
