"""`sparkdeck metrics` as a user runs it, the bytes_per_token preset field, and the reader's
typed outcomes against real sockets on loopback (no Docker needed)."""

from __future__ import annotations

import asyncio
import json
import socket
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from sparkdeck.metrics.reader import (
    InvalidSample, MetricsOff, MetricsReader, MetricsTarget, RawSample, Unreachable,
)
from sparkdeck.metrics.sampler import plan_for
from sparkdeck.presets import PresetError, load_file
from tests.conftest import free_port, write_preset

LLAMA_BODY = (Path(__file__).parent / "fixtures" / "metrics" / "llamacpp-b11434-busy.prom")


def run_cli(*args: str, timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "sparkdeck", *args], capture_output=True,
                          text=True, timeout=timeout, stdin=subprocess.DEVNULL)


class _Answers(BaseHTTPRequestHandler):
    """Answers each path with a fixed status and body."""

    routes: dict[str, tuple[int, bytes]] = {}

    def do_GET(self) -> None:  # noqa: N802
        status, body = self.routes.get(self.path, (404, b"not found"))
        self.send_response(status)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def server():
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _Answers)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()
    httpd.server_close()


def test_reader_outcomes_are_typed(server):
    _Answers.routes = {"/ok": (200, LLAMA_BODY.read_bytes()), "/off": (501, b"off"),
                       "/bad": (200, b"\xff\xfe"), "/err": (500, b"boom")}
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        closed = f"http://127.0.0.1:{s.getsockname()[1]}"

    async def scrape_all():
        reader = MetricsReader()
        try:
            return [await reader.scrape(MetricsTarget(url, "llamacpp", off_hint="turn it on"))
                    for url in (server + "/ok", server + "/off", server + "/bad",
                                server + "/err", closed + "/metrics")]
        finally:
            await reader.aclose()

    ok, off, bad, err, refused = asyncio.run(scrape_all())
    assert isinstance(ok, RawSample) and ok.families["llamacpp:requests_processing"].total() == 2
    assert isinstance(off, MetricsOff) and off.hint == "turn it on" and off.status_code == 501
    assert isinstance(bad, InvalidSample) and "UTF-8" in bad.reason
    assert isinstance(err, Unreachable) and "HTTP 500" in err.reason
    assert isinstance(refused, Unreachable) and "ConnectError" in refused.reason


def test_cli_json_lines_from_an_endpoint(server):
    _Answers.routes = {"/metrics": (200, LLAMA_BODY.read_bytes())}
    done = run_cli("metrics", "--endpoint", server, "--kind", "llamacpp", "--json",
                   "--samples", "3", "--interval", "0.2")
    assert done.returncode == 0, done.stderr
    lines = [json.loads(line) for line in done.stdout.splitlines()]
    assert len(lines) == 3
    assert [line["running"] for line in lines] == [2, 2, 2]
    assert lines[0]["generation_tps"] is None and lines[2]["generation_tps"] == 0.0
    assert lines[1]["wall"] - lines[0]["wall"] == pytest.approx(0.2, abs=0.15)


def test_cli_human_output_and_failures(server):
    _Answers.routes = {"/metrics": (200, LLAMA_BODY.read_bytes())}
    done = run_cli("metrics", "--endpoint", server, "--kind", "llamacpp", "--samples", "1")
    assert done.returncode == 0 and "running 2  waiting 2" in done.stdout
    assert "KV n/a" in done.stdout  # llama-server does not report it: n/a, never 0

    custom = run_cli("metrics", "--endpoint", server, "--kind", "openai", "--samples", "1")
    assert custom.returncode == 1 and "metrics_map" in custom.stderr
    assert run_cli("metrics", "--endpoint", server, "--samples", "0").returncode == 1
    unknown = run_cli("metrics", "--endpoint", f"http://127.0.0.1:{free_port()}",
                      "--samples", "1")
    assert unknown.returncode == 1 and "nothing answers" in unknown.stderr


@pytest.mark.docker
def test_cli_without_an_engine_says_so(isolated_dirs, docker_client, monkeypatch):
    monkeypatch.setenv("SPARKDECK_SCOPE", "t-metrics-none")
    done = run_cli("metrics", "--samples", "1")
    assert done.returncode == 1
    assert "no sparkdeck engine is running" in done.stderr and "--endpoint" in done.stderr


def _preset_fields(**extra):
    return {"title": "t", "kind": "vllm", "image": "x", "model": "m", **extra}


def test_bytes_per_token_is_validated_and_reaches_the_plan(tmp_path):
    preset = load_file(write_preset(tmp_path, "bpt", **_preset_fields(bytes_per_token=4.6e9)))
    assert preset.bytes_per_token == 4.6e9
    plan = plan_for("http://127.0.0.1:8000", "vllm", "/metrics", preset)
    assert plan.bytes_per_token == 4.6e9 and plan.target.url.endswith(":8000/metrics")
    for bad, fragment in ((0, "out of range"), (-5.0, "out of range"), ("4 GB", "a number"),
                          (2e13, "ceiling")):
        path = write_preset(tmp_path, "bad", **_preset_fields(bytes_per_token=bad))
        with pytest.raises(PresetError) as info:
            load_file(path)
        assert f"{path}: bytes_per_token:" in str(info.value) and fragment in str(info.value)


def test_custom_engine_metrics_map_is_checked(tmp_path):
    fields = {"title": "t", "kind": "openai", "image": "x",
              "openai": {"container_port": 9000, "metrics_path": "/metrics",
                         "metrics_map": {"tokens": "a_total", "running": "b c"}}}
    with pytest.raises(PresetError) as info:
        load_file(write_preset(tmp_path, "custom", **fields))
    text = str(info.value)
    assert "openai.metrics_map: 'tokens' is not a metric sparkdeck reads" in text
    assert "running = 'b c' is not a metric name" in text
