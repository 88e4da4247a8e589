"""The endpoint passes each caller's request on as the caller sent it, on a real service.

Behind it, attached by URL, a real OpenAI-compatible HTTP server on loopback that records
the headers of every request it gets and sets a cookie on its answers. A forwarder built on
an HTTP client (not its transport) gets both wrong: the client adds its own default headers
(`User-Agent: python-httpx`, `Accept: */*`) to a request that had none, and its cookie jar
keeps one caller's cookie and hands it to the engine with the next caller's request.
"""

from __future__ import annotations

import http.client
import json
import os
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler

import pytest

from tests.conftest import free_port
from tests.support.cli import run_cli, wait_for
from tests.support.metrics_loopback import serving_handler

pytestmark = pytest.mark.docker  # the service follows Docker (no engine of its own here)
MODEL = "atlas-7b"


class Recorder(BaseHTTPRequestHandler):
    """/v1/models for the attach and the endpoint; a chat answer that sets a cookie."""

    seen: list[dict[str, str]] = []
    lock = threading.Lock()
    hang_up = False  # read a POST, then close the connection without an answer

    def do_GET(self) -> None:
        self._answer({"object": "list", "data": [{"id": MODEL, "object": "model"}]})

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        with self.lock:
            self.seen.append({k.lower(): v for k, v in self.headers.items()})
        if self.hang_up:
            self.close_connection = True
            return
        self._answer(
            {
                "id": "x",
                "object": "chat.completion",
                "model": MODEL,
                "choices": [
                    {
                        "index": 0,
                        "finish_reason": "stop",
                        "message": {"role": "assistant", "content": "hi"},
                    }
                ],
                "usage": {"prompt_tokens": 3, "completion_tokens": 1},
            },
            cookie="session=from-the-engine; Path=/",
        )

    def _answer(self, data: dict, cookie: str | None = None) -> None:
        body = json.dumps(data).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        if cookie:
            self.send_header("Set-Cookie", cookie)
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def endpoint(isolated_dirs, docker_client, scope) -> Iterator[int]:
    port = free_port()
    env = {
        **os.environ,
        "SPARKDECK_SCOPE": scope,
        "SPARKDECK_SERVICE": "auto",
        "SPARKDECK_ENDPOINT_PORT": str(port),
    }
    Recorder.seen, Recorder.hang_up = [], False
    with serving_handler(Recorder) as url:
        attached = run_cli("attach", url, "--name", "recorder", env=env)
        assert attached.returncode == 0, attached.stderr
        started = run_cli("service", "start", env=env)
        assert started.returncode == 0, started.stderr
        try:
            yield port
        finally:
            run_cli("service", "stop", env=env)


def post(port: int, headers: dict[str, str], answer: list[bytes] | None = None) -> int:
    """A chat request with exactly these headers (http.client adds only Host,
    Accept-Encoding: identity and Content-Length); its body goes into `answer`."""
    body = json.dumps({"model": MODEL, "messages": [{"role": "user", "content": "hi"}]})
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        connection.request(
            "POST",
            "/v1/chat/completions",
            body=body,
            headers={"Content-Type": "application/json", **headers},
        )
        response = connection.getresponse()
        body = response.read()
        if answer is not None:
            answer.append(body)
        return response.status
    finally:
        connection.close()


def test_the_engine_gets_the_callers_headers_and_no_cookie_from_another_caller(endpoint):
    def answered() -> bool:
        try:
            return post(endpoint, {"X-Caller": "first"}) == 200
        except OSError:
            return False

    wait_for(
        answered, timeout=30, what="the endpoint answering through the attached server", every=0.3
    )
    assert post(endpoint, {"X-Caller": "second"}) == 200
    first, second = Recorder.seen[-2], Recorder.seen[-1]
    assert first["x-caller"] == "first" and second["x-caller"] == "second"
    # what the caller sent, and nothing a client library would add
    assert "user-agent" not in second and "accept" not in second, second
    assert second.get("accept-encoding") == "identity"
    # the first answer's Set-Cookie was the first caller's: the engine never sees it again
    assert "cookie" not in second, second


def test_an_engine_that_hangs_up_gets_the_caller_a_502_that_says_so(endpoint, isolated_dirs):
    wait_for(
        lambda: post(endpoint, {}) == 200,
        timeout=30,
        every=0.3,
        what="the endpoint answering through the attached server",
    )
    Recorder.hang_up = True
    body: list[bytes] = []
    assert post(endpoint, {"X-Caller": "hung-up-on"}, body) == 502
    error = json.loads(body[0])["error"]
    assert error["code"] == "engine_unreachable" and "recorder" in error["message"]
    assert Recorder.seen[-1]["x-caller"] == "hung-up-on"  # it did reach the engine
    log = isolated_dirs["data"] / "requests.jsonl"
    # the log is appended off the event loop: the 502's line may come a moment later
    (row,) = wait_for(
        lambda: (
            [r for r in map(json.loads, log.read_text().splitlines()) if r["status"] == 502]
            if log.exists()
            else None
        ),
        timeout=5,
        what="the 502 in the request log",
    )
    assert "did not answer" in row["error"] and row["engine"] == "recorder"
