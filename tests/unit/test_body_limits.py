"""Every body sparkdeck reads has a ceiling (issue 12, item 9): an endless answer from a
server (seen: /metrics grew `status --endpoint` to 412 MB in 60 s) ends in a clear message,
quickly, with the process's memory bounded.

`status --endpoint` runs as a real subprocess against a real loopback server whose every
answer never ends; its peak memory comes from the kernel (wait4's ru_maxrss).
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

from sparkdeck.http_limits import BodyTooLarge, capped_client, get_capped
from tests.support.hostile_loopback import Answer, HostileServer

ROOT = Path(__file__).parents[2]
ENDLESS = Answer(
    200,
    (("Content-Type", "text/plain"),),
    (b"# HELP x\n",),
    forever=b"vllm:num_requests_running 1\n" * 64,
)


@pytest.fixture
def server():
    with HostileServer() as running:
        running.answer = ENDLESS
        yield running


def _status(args: list[str], tmp_path: Path) -> tuple[int, str, str, float]:
    """Run `sparkdeck status ...`; (exit code, stdout, stderr, seconds)."""
    env = {
        **os.environ,
        "SPARKDECK_CONFIG_DIR": str(tmp_path),
        "SPARKDECK_DATA_DIR": str(tmp_path),
        "DOCKER_HOST": "unix:///nonexistent.sock",
    }
    started = time.monotonic()
    process = subprocess.Popen(
        [sys.executable, "-m", "sparkdeck", "status", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        cwd=ROOT,
    )
    try:
        out, err = process.communicate(timeout=45)
    except subprocess.TimeoutExpired:
        process.kill()
        process.communicate()
        raise AssertionError("status did not finish in 45 s against an endless answer") from None
    return process.returncode, out, err, time.monotonic() - started


def test_status_probe_of_an_endless_server_ends_quickly(server, tmp_path):
    # the kind probe reads only the start of each answer (it looks like vLLM from there)
    code, out, err, seconds = _status(["--endpoint", server.url, "--json"], tmp_path)
    assert code == 0 and "Traceback" not in err, err
    status = json.loads(out)["endpoint"]
    assert status["kind"] == "vllm" and "sent more than 8 MiB" in status["error"]
    assert seconds < 30


def test_status_check_of_an_endless_health_answer_says_so(server, tmp_path):
    code, out, err, seconds = _status(
        ["--endpoint", server.url, "--kind", "vllm", "--json"], tmp_path
    )
    assert code == 0, err
    status = json.loads(out)["endpoint"]
    assert not status["reachable"] and "sent more than 8 MiB" in status["error"]
    assert seconds < 30


def test_peak_memory_stays_far_below_what_an_unbounded_read_takes(server, tmp_path):
    """In a fresh interpreter, so the peak is this run's alone."""
    script = (
        "import resource, subprocess, sys; p = subprocess.run([sys.executable, '-m', "
        "'sparkdeck', 'status', '--endpoint', sys.argv[1], '--kind', 'vllm'], "
        "capture_output=True, timeout=45); "
        "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss // 1024)"
    )
    env = {
        **os.environ,
        "SPARKDECK_CONFIG_DIR": str(tmp_path),
        "SPARKDECK_DATA_DIR": str(tmp_path),
        "DOCKER_HOST": "unix:///nonexistent.sock",
    }
    done = subprocess.run(
        [sys.executable, "-c", script, server.url],
        capture_output=True,
        text=True,
        env=env,
        cwd=ROOT,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert int(done.stdout) < 150, f"peak RSS {done.stdout.strip()} MiB"


def test_capped_client_raises_a_transport_error_past_the_limit(server):
    with capped_client(64 * 1024, timeout=5.0) as client:
        with pytest.raises(BodyTooLarge, match="sent more than 65536 bytes"):
            client.get(server.url + "/health")
    assert issubclass(BodyTooLarge, httpx.TransportError)  # every caller already handles it
    server.answer = Answer(200, pieces=(b"ok",))
    assert get_capped(server.url + "/health", timeout=5.0).text == "ok"
