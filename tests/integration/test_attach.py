"""Engines sparkdeck did not start: attach by URL, kind detection, --endpoint, never stopped."""

from __future__ import annotations

import json
import os
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from sparkdeck.endpoints import AttachedRegistry, EndpointError, endpoint_for, normalise_url
from sparkdeck.engines import EndpointProbe, identify
from sparkdeck.launch.sequence import Launcher
from sparkdeck.presets import load_file
from tests.conftest import free_port, llama_preset_fields, scope_containers, write_preset
from tests.support.cli import run_cli


class _OpenAIOnly(BaseHTTPRequestHandler):
    """A minimal OpenAI-compatible server on loopback: /v1/models and nothing else."""

    def do_GET(self) -> None:
        if self.path == "/v1/models":
            body = json.dumps(
                {"object": "list", "data": [{"id": "atlas-7b", "object": "model"}]}
            ).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
        else:
            body = b'{"error":"not found"}'
            self.send_response(404)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def openai_server():
    server = ThreadingHTTPServer(("127.0.0.1", 0), _OpenAIOnly)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def test_attach_generic_openai_server_detects_kind(openai_server):
    endpoint = endpoint_for(openai_server + "/v1/")
    assert endpoint.kind == "openai" and endpoint.url == openai_server
    result = run_cli("attach", openai_server, "--name", "atlas", env=_env())
    assert result.returncode == 0, result.stderr
    assert "as OpenAI-compatible (custom), healthy; models: atlas-7b" in result.stdout
    (attached,) = AttachedRegistry().load()
    assert (attached.name, attached.kind, attached.health_path) == ("atlas", "openai", "/v1/models")
    status = json.loads(run_cli("status", "--json", env=_env()).stdout)
    assert status["attached"][0]["healthy"] and status["attached"][0]["models"] == ["atlas-7b"]
    direct = json.loads(run_cli("status", "--json", "--endpoint", openai_server, env=_env()).stdout)
    assert direct["endpoint"]["source"] == "flag" and direct["endpoint"]["kind"] == "openai"
    assert run_cli("detach", "atlas", env=_env()).returncode == 0
    assert AttachedRegistry().load() == []
    assert run_cli("detach", "atlas", env=_env()).returncode == 1


def test_attach_unreachable_is_a_clear_error():
    port = free_port()
    result = run_cli("attach", f"http://127.0.0.1:{port}", env=_env())
    assert result.returncode == 1
    assert f"nothing answers at http://127.0.0.1:{port}" in result.stderr
    with pytest.raises(EndpointError):
        normalise_url("ftp://example")


def test_detection_from_recorded_answers():
    """Recorded/written answers for kinds that cannot run here (labelled as such)."""
    ollama = EndpointProbe(
        "u",
        {
            "/api/version": (200, '{"version":"0.12.3"}'),
            "/v1/models": (200, '{"object":"list","data":[]}'),
        },
    )
    assert identify(ollama).name == "ollama"
    vllm = EndpointProbe(
        "u",
        {
            "/metrics": (200, "# HELP vllm:num_requests_running x\n"),
            "/v1/models": (200, '{"data":[{"owned_by":"vllm"}]}'),
        },
    )
    assert identify(vllm).name == "vllm"
    sglang = EndpointProbe(
        "u", {"/metrics": (200, "sglang:num_running_reqs 0\n"), "/v1/models": (200, '{"data":[]}')}
    )
    assert identify(sglang).name == "sglang"
    assert identify(EndpointProbe("u", {"/health": (200, "ok")})) is None


@pytest.mark.docker
@pytest.mark.llama
def test_attach_a_llama_server_started_elsewhere(
    runtime, docker_client, scope, tmp_path, llama_image
):
    # Started by "another launcher": a runtime of another scope, as compose would.
    port = free_port()
    preset = load_file(
        write_preset(tmp_path / "p", "elsewhere", **llama_preset_fields(llama_image, port))
    )
    engine = Launcher(runtime).launch(preset, flush=False)
    url = f"http://127.0.0.1:{port}"
    detected = endpoint_for(url)
    assert detected.kind == "llamacpp" and detected.metrics_path == "/metrics"
    env = {**_env(), "SPARKDECK_SCOPE": scope + "-cli"}
    assert run_cli("attach", url, env=env).returncode == 0
    report = json.loads(run_cli("status", "--json", env=env).stdout)
    assert report["engine"] is None  # not sparkdeck's in this scope
    (attached,) = report["attached"]
    assert attached["kind"] == "llamacpp" and attached["healthy"]
    assert attached["models"] and attached["models"][0].endswith("tiny.gguf")
    # `stop` never touches what this sparkdeck did not start
    assert run_cli("stop", env=env).stdout.startswith("no sparkdeck engine is running")
    assert [c.id for c in scope_containers(docker_client, scope)] == [engine.container_id]


def _env() -> dict[str, str]:
    return dict(os.environ)
