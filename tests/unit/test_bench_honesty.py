"""A benchmark says when its numbers cannot be trusted, shows the server's own, and ends runs
that were killed mid-way.

Against the timed loopback server (tests/support/timed_server, its own process): variant
`timings` reports its own decode and prompt rates like llama-server's `timings`; variant
`burst` generates on the same schedule but holds the reply back and sends it in one write at
the end, as a server (or a client) that fell behind delivers it. The old runner stored the
burst's delivery speed (thousands of tok/s against the server's 400) as `complete`.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from sparkdeck.bench.store import BenchStore
from tests.support.cli import sparkdeck
from tests.support.timed_server import running

DECODE_RATE = 400.0


def bench(url: str, env_dirs: dict[str, Path], *extra: str) -> subprocess.CompletedProcess:
    return sparkdeck(
        "bench",
        "--endpoint",
        url,
        "--kind",
        "openai",
        "--concurrency",
        "1",
        "--runs",
        "2",
        "--warmup",
        "0",
        "--prompt-tokens",
        "50",
        "--output-tokens",
        "80",
        *extra,
        env_dirs=env_dirs,
    )


def test_a_reply_that_arrives_in_one_burst_makes_the_run_unreliable(isolated_dirs):
    with running("burst", 20000.0, DECODE_RATE) as url:
        done = bench(url, isolated_dirs)
    assert done.returncode == 0, done.stderr  # measured to the end, with a loud caveat
    assert "unreliable" in done.stdout and "warning: the decode figures are unreliable" in (
        done.stderr
    )
    history = sparkdeck("bench", "history", env_dirs=isolated_dirs)
    assert "unreliable" in history.stdout
    (run,) = json.loads(sparkdeck("bench", "history", "--json", env_dirs=isolated_dirs).stdout)[
        "runs"
    ]
    assert run["status"] == "unreliable"
    assert "less time than the server spent generating them" in run["reason"]
    assert "all at once by the client's clock" in run["reason"]
    # the server's own rate is kept beside the client's nonsense
    summary = run["points"][0]["summary"]
    assert summary["server_decode_tps"]["median"] == pytest.approx(DECODE_RATE, rel=0.1)
    # by the client's clock the reply took no time (one read): no rate, or a nonsense one
    client = summary["decode_tps"]["median"]
    assert client is None or client > 3 * DECODE_RATE


def test_server_figures_are_shown_beside_the_clients_and_prefill_is_explained(isolated_dirs):
    with running("timings", 20000.0, DECODE_RATE) as url:
        done = bench(url, isolated_dirs)
    assert done.returncode == 0, done.stderr
    assert "complete" in done.stdout
    assert "server's own (llama.cpp timings, median per request): c=1 decode" in done.stdout
    assert "note: prefill tok/s above is the prompt over the TTFT the client saw" in done.stdout
    (run,) = BenchStore().runs()
    (point,) = run.points
    assert point.summary["server_decode_tps"]["median"] == pytest.approx(DECODE_RATE, rel=0.1)
    assert point.decode_tps == pytest.approx(point.summary["server_decode_tps"]["median"], rel=0.1)


def test_a_run_killed_mid_way_is_marked_interrupted(isolated_dirs):
    store = BenchStore()
    with running("timings", 20000.0, 20.0) as url:  # 80 tokens at 20 tok/s: 4 s a request
        proc = sparkdeck(
            "bench",
            "--endpoint",
            url,
            "--kind",
            "openai",
            "--concurrency",
            "1",
            "--runs",
            "3",
            "--warmup",
            "0",
            "--prompt-tokens",
            "50",
            "--output-tokens",
            "80",
            env_dirs=isolated_dirs,
            background=True,
        )
        try:
            deadline = time.monotonic() + 60
            while not [
                r for r in (store.runs() if store.path.exists() else []) if r.status == "running"
            ]:
                assert proc.poll() is None and time.monotonic() < deadline, "never started"
                time.sleep(0.1)
            # while it runs, another process must leave it alone
            history = sparkdeck("bench", "history", "--json", env_dirs=isolated_dirs)
            assert [r["status"] for r in json.loads(history.stdout)["runs"]] == ["running"]
        finally:
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10)
    history = sparkdeck("bench", "history", "--json", env_dirs=isolated_dirs)
    (run,) = json.loads(history.stdout)["runs"]
    assert run["status"] == "interrupted" and run["finished_at"]
    assert "killed or crashed" in run["reason"]
