"""Real vLLM (CPU build, tiny random model): what it answers, and how sparkdeck reads it.

These tests talk to the session's `vllm_server` over real HTTP on loopback. They pin down
the facts the rest of sparkdeck builds on (health, model list, streaming with usage, metric
names) and check sparkdeck's own detection and `status` against the live server.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
from httpx_sse import connect_sse
from prometheus_client.parser import text_string_to_metric_families

from sparkdeck.endpoints import check, endpoint_for, probe
from sparkdeck.engines import EndpointProbe, identify
from tests.support.vllm_server import VllmServer

pytestmark = pytest.mark.vllm
FIXTURES = Path(__file__).parents[1] / "fixtures" / "metrics"
VLLM_VERSION = "0.32.0"


def _metric_samples(base_url: str) -> dict[str, float]:
    """Every sample on /metrics by name (labels summed away), read with prometheus_client."""
    body = httpx.get(base_url + "/metrics", timeout=30).text
    samples: dict[str, float] = {}
    for family in text_string_to_metric_families(body):
        for sample in family.samples:
            samples[sample.name] = samples.get(sample.name, 0.0) + sample.value
    return samples


def _wait_for_metric(base_url: str, name: str, expected: float, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while (value := _metric_samples(base_url).get(name)) != expected:
        assert time.monotonic() < deadline, f"{name} is {value}, never {expected}"
        time.sleep(0.2)


def _stream_chat(server: VllmServer, max_tokens: int) -> tuple[list[str], list[dict], float]:
    """A streamed chat completion with usage: (content pieces, all chunks, seconds taken)."""
    payload = {
        "model": server.model,
        "stream": True,
        "max_tokens": max_tokens,
        "stream_options": {"include_usage": True},
        "messages": [{"role": "user", "content": "Tell me a story about a cat."}],
    }
    pieces: list[str] = []
    chunks: list[dict] = []
    started = time.monotonic()
    with (
        httpx.Client(timeout=120) as client,
        connect_sse(
            client, "POST", server.base_url + "/v1/chat/completions", json=payload
        ) as events,
    ):
        assert events.response.status_code == 200
        for event in events.iter_sse():
            if event.data == "[DONE]":
                break
            chunk = json.loads(event.data)
            chunks.append(chunk)
            for choice in chunk.get("choices", []):
                if choice["delta"].get("content"):
                    pieces.append(choice["delta"]["content"])
    return pieces, chunks, time.monotonic() - started


def test_health_is_200_with_empty_body(vllm_server):
    response = httpx.get(vllm_server.base_url + "/health", timeout=10)
    assert response.status_code == 200 and response.text == ""


def test_models_lists_the_served_name(vllm_server):
    listed = httpx.get(vllm_server.base_url + "/v1/models", timeout=10).json()
    assert [m["id"] for m in listed["data"]] == [vllm_server.model]
    assert listed["data"][0]["owned_by"] == "vllm"
    assert listed["data"][0]["max_model_len"] == 1024


def test_version_endpoint(vllm_server):
    assert httpx.get(vllm_server.base_url + "/version", timeout=10).json() == {
        "version": VLLM_VERSION
    }


def test_streamed_chat_yields_text_and_a_usage_chunk(vllm_server):
    pieces, chunks, seconds = _stream_chat(vllm_server, max_tokens=64)
    text = "".join(pieces)
    # The tiny model's vocabulary is printable ASCII and word pieces: replies decode to text.
    assert len(pieces) >= 32 and text.strip(), text
    assert all(c.isprintable() or c in "\n\t" for c in text), text
    usage = chunks[-1]["usage"]
    assert chunks[-1]["choices"] == []  # the usage chunk comes last, on its own
    assert usage["completion_tokens"] == 64  # special tokens cannot be sampled: no early end
    assert usage["prompt_tokens"] > 5
    assert usage["total_tokens"] == usage["prompt_tokens"] + 64
    finish = [c["finish_reason"] for ch in chunks for c in ch["choices"] if c["finish_reason"]]
    assert finish == ["length"]
    print(f"one stream: 64 tokens in {seconds:.2f} s = {64 / seconds:.0f} tok/s")


def test_metrics_count_generated_tokens(vllm_server):
    before = _metric_samples(vllm_server.base_url)
    assert "vllm:kv_cache_usage_perc" in before or "vllm:gpu_cache_usage_perc" in before
    for name in (
        "vllm:num_requests_running",
        "vllm:num_requests_waiting",
        "vllm:prompt_tokens_total",
        "vllm:time_to_first_token_seconds_count",
    ):
        assert name in before, name
    _stream_chat(vllm_server, max_tokens=20)
    # The counters move by exactly this request (tests in a session run one at a time); the
    # wait only covers stats that reach /metrics a moment after the stream ends.
    _wait_for_metric(
        vllm_server.base_url,
        "vllm:generation_tokens_total",
        before["vllm:generation_tokens_total"] + 20,
        timeout=10,
    )
    _wait_for_metric(
        vllm_server.base_url,
        "vllm:time_to_first_token_seconds_count",
        before["vllm:time_to_first_token_seconds_count"] + 1,
        timeout=10,
    )


def _abandoned_stream(server: VllmServer, max_tokens: int) -> tuple[float, float]:
    """Read 5 events of a long stream, hang up; (tokens generated, requests counted finished)."""
    before = _metric_samples(server.base_url)
    payload = {
        "model": server.model,
        "stream": True,
        "max_tokens": max_tokens,
        "messages": [{"role": "user", "content": "Write a very long story."}],
    }
    with (
        httpx.Client(timeout=120) as client,
        connect_sse(
            client, "POST", server.base_url + "/v1/chat/completions", json=payload
        ) as events,
    ):
        for seen, _ in enumerate(events.iter_sse()):
            if seen == 5:
                break  # leaving the block closes the connection mid-stream
    _wait_for_metric(server.base_url, "vllm:num_requests_running", 0.0)
    after = _metric_samples(server.base_url)
    return tuple(
        after[name] - before[name]
        for name in (  # type: ignore[return-value]
            "vllm:generation_tokens_total",
            "vllm:request_success_total",
        )
    )


def test_client_disconnect_aborts_the_request(vllm_server):
    """Closing the stream stops generation (the chat pane's cancel relies on it).

    How soon vLLM notices depends on its API server getting the CPU: on a loaded 2-core box
    the engine core has been seen to generate 600 more tokens first (it runs ahead of the
    API server). So up to three tries; a server that never aborts runs each to max_tokens.
    """
    max_tokens = 990
    for _ in range(3):
        generated, finished = _abandoned_stream(vllm_server, max_tokens)
        if generated < max_tokens:
            break
    assert 5 <= generated < max_tokens
    # Seen on 0.32: a request the client abandons is not counted in request_success_total
    # under any finished_reason (not even "abort").
    assert finished == 0


def test_live_metric_names_match_the_captured_fixture(vllm_server):
    """The fixtures other tests parse were captured from this version: same metric families."""
    body = httpx.get(vllm_server.base_url + "/metrics", timeout=30).text
    live = {f.name for f in text_string_to_metric_families(body) if f.name.startswith("vllm:")}
    captured_text = (FIXTURES / f"vllm-{VLLM_VERSION}-after-load.txt").read_text()
    captured = {
        f.name for f in text_string_to_metric_families(captured_text) if f.name.startswith("vllm:")
    }
    assert live == captured


def test_sparkdeck_identifies_the_server_as_vllm(vllm_server):
    found = probe(vllm_server.base_url)
    assert identify(found).name == "vllm"
    endpoint = endpoint_for(vllm_server.base_url + "/v1")
    assert (endpoint.kind, endpoint.url) == ("vllm", vllm_server.base_url)
    assert (endpoint.health_path, endpoint.metrics_path) == ("/health", "/metrics")
    status = check(endpoint)
    assert status.healthy and status.health_code == 200
    assert status.models == (vllm_server.model,)
    # Either of vLLM's marks is enough: a proxy may hide /metrics, or /v1/models
    (models_only, metrics_only) = (
        EndpointProbe(found.url, {p: a for p, a in found.answers.items() if p == keep})
        for keep in ("/v1/models", "/metrics")
    )
    assert identify(models_only).name == "vllm"
    assert identify(metrics_only).name == "vllm"


def test_status_cli_reports_it_healthy(vllm_server, isolated_dirs):
    done = subprocess.run(
        [sys.executable, "-m", "sparkdeck", "status", "--json", "--endpoint", vllm_server.base_url],
        capture_output=True,
        text=True,
        timeout=120,
        env=dict(os.environ),
        stdin=subprocess.DEVNULL,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)["endpoint"]
    assert report["kind"] == "vllm" and report["healthy"] is True
    assert report["models"] == [vllm_server.model] and report["source"] == "flag"


def test_start_up_phases_are_found_in_the_real_servers_log(vllm_server):
    """The launch's start-up timeline marks phases from these lines (no CUDA graphs on CPU)."""
    from sparkdeck.engines import get_kind
    from sparkdeck.guard.timeline import mark_phases

    lines = vllm_server.log_path.read_text(errors="replace").splitlines()
    marks = mark_phases(
        ((float(i), line) for i, line in enumerate(lines)), get_kind("vllm").startup_phases
    )
    assert [m.phase for m in marks] == ["weights loading", "KV-cache allocation", "ready"]
    assert "Starting to load model" in marks[0].line
    assert "KV cache" in marks[1].line and "Application startup complete" in marks[2].line
