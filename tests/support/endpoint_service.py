"""The real sparkdeck service with its OpenAI endpoint, in front of an attached engine
stand-in: a real HTTP server on loopback that reads each request's whole body and answers
like an OpenAI chat endpoint, counting what it received.

Requests go out through `ask`: raw http.client on a connection of its own, so the test knows
the client port the endpoint writes into its request log and can find the one line that
belongs to each request.
"""

from __future__ import annotations

import http.client
import json
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import free_port
from tests.support.cli import run_cli, wait_for
from tests.support.http_json import JsonReplies
from tests.support.service_env import service_pid

MODEL = "sink-7b"  # the stand-in's one model


class SinkEngine(JsonReplies):
    """/v1/models for the attach and the endpoint; every POST read whole and answered."""

    protocol_version = "HTTP/1.1"
    server: _SinkServer

    def do_GET(self) -> None:  # noqa: N802 (http.server's naming)
        self._json(200, {"object": "list", "data": [{"id": MODEL, "object": "model"}]})

    def do_POST(self) -> None:  # noqa: N802
        size = int(self.headers.get("Content-Length", 0))
        body = self.rfile.read(size)
        with self.server.lock:
            self.server.received.append(len(body))
        if self.server.hold:
            # as an engine in a long prefill: no answer yet, until the caller's side closes
            # the connection (a read that ends), which is when the engine would drop it
            self.connection.settimeout(None)
            self.rfile.read(1)
            with self.server.lock:
                self.server.dropped.append(time.monotonic())
            self.close_connection = True
            return
        self._json(
            200,
            {
                "id": "x",
                "object": "chat.completion",
                "model": MODEL,
                "choices": [
                    {
                        "index": 0,
                        "finish_reason": "stop",
                        "message": {"role": "assistant", "content": "ok"},
                    }
                ],
                "usage": {"prompt_tokens": 3, "completion_tokens": 1},
            },
        )

    def log_message(self, *args: object) -> None:
        pass


class _SinkServer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), SinkEngine)
        self.lock = threading.Lock()
        self.received: list[int] = []  # the size of each body the engine got
        self.hold = False  # True: a POST is never answered (see SinkEngine.do_POST)
        self.dropped: list[float] = []  # when each held request's connection was closed


@contextmanager
def sink_engine() -> Iterator[_SinkServer]:
    server = _SinkServer()
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()


CHAT_PATH = "/v1/chat/completions"
A_CHAT = json.dumps({"model": MODEL, "messages": [{"role": "user", "content": "hi"}]}).encode()


@pytest.fixture
def endpoint(service_env, isolated_dirs) -> Iterator[dict]:
    """The service, its endpoint forwarding to the attached stand-in: its "port", the CLI's
    "env", the "data" dir, the stand-in "engine" and the service's "pid"."""
    port = free_port()
    env = {**service_env, "SPARKDECK_ENDPOINT_PORT": str(port)}
    with sink_engine() as engine:
        attached = run_cli(
            "attach", f"http://127.0.0.1:{engine.server_address[1]}", "--name", "sink", env=env
        )
        assert attached.returncode == 0, attached.stderr
        started = run_cli("service", "start", env=env)
        assert started.returncode == 0, started.stderr
        wait_for(
            lambda: ask(port, "POST", CHAT_PATH, A_CHAT).status == 200,
            timeout=30,
            every=0.3,
            what="the endpoint forwarding to the stand-in",
        )
        yield {
            "port": port,
            "env": env,
            "data": isolated_dirs["data"],
            "engine": engine,
            "pid": service_pid(env),
        }


@dataclass
class Answer:
    """One request's outcome: its status and JSON body, or the error that ended it."""

    client: str  # "127.0.0.1:PORT", as the request log writes it
    status: int | None = None
    body: Any = None
    headers: dict[str, str] = field(default_factory=dict)
    failed: str | None = None  # the connection broke before an answer was read

    @property
    def error(self) -> dict[str, Any]:
        return self.body["error"]


def ask(
    port: int,
    method: str,
    path: str,
    body: bytes | None = None,
    headers: dict[str, str] | None = None,
    timeout: float = 30.0,
) -> Answer:
    """One request on its own connection; a connection broken mid-send is an Answer too."""
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    connection.connect()
    local = connection.sock.getsockname()
    answer = Answer(f"{local[0]}:{local[1]}")
    try:
        connection.request(method, path, body=body, headers=headers or {})
        response = connection.getresponse()
        raw = response.read()
        answer.status, answer.headers = response.status, dict(response.getheaders())
        try:
            answer.body = json.loads(raw)
        except ValueError:
            answer.body = raw.decode("utf-8", "replace")
    except (OSError, http.client.HTTPException) as exc:
        answer.failed = type(exc).__name__
    finally:
        connection.close()
    return answer


def log_rows(data: Path) -> list[dict[str, Any]]:
    """The request log's rows, strictly: a line the service is still appending (no newline
    yet; read mid-write, a test once failed on half a row) is left for the next read."""
    log = data / "requests.jsonl"
    raw = log.read_bytes() if log.exists() else b""
    whole = raw[: raw.rfind(b"\n") + 1]
    return [json.loads(line) for line in whole.decode().splitlines()]


def rows_of(data: Path, answer: Answer) -> list[dict[str, Any]]:
    """The request-log lines written for this one request (matched by its client port)."""
    return [row for row in log_rows(data) if row["client"] == answer.client]


def write_settings(config: Path, endpoint: dict[str, Any]) -> None:
    config.mkdir(parents=True, exist_ok=True)
    lines = [f"{key} = {json.dumps(value)}" for key, value in endpoint.items()]
    (config / "settings.toml").write_text("[endpoint]\n" + "\n".join(lines) + "\n")
