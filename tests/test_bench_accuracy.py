"""The runner's figures against a server whose timing the test sets (tests/support/timed_server).

The server runs in its own process, sends each chunk at a planned perf_counter deadline and
logs when it really sent it; perf_counter is one clock for every process here, so each
request's figures are checked against what the server did as well as against the plan.
Durations are long enough (0.5 s TTFT, ~1.6 s of decode) that a loaded 2-core machine's
scheduler jitter stays inside the tolerances: 0.5 % decode, 1 % prefill, 3 ms TTFT.
"""

from __future__ import annotations

import statistics
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from sparkdeck.bench.runner import BenchConfig, BenchOutcome, BenchRunner
from sparkdeck.engines import get_kind
from tests.conftest import free_port

REPO = Path(__file__).resolve().parent.parent
PREFILL_RATE = 2000.0  # tokens/s: 1000 prompt tokens -> 0.5 s to the first token
DECODE_RATE = 50.0
PROMPT, OUTPUT = 1000, 80


def start_timed_server(variant: str, prefill: float = PREFILL_RATE,
                       decode: float = DECODE_RATE) -> tuple[subprocess.Popen, str]:
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "tests.support.timed_server", "--port", str(port),
         "--variant", variant, "--prefill-rate", str(prefill), "--decode-rate", str(decode)],
        cwd=REPO)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        try:
            if httpx.get(url + "/v1/models", timeout=1).status_code == 200:
                return proc, url
        except httpx.TransportError:
            time.sleep(0.05)
    proc.kill()
    raise AssertionError("the timed server did not start")


@pytest.fixture
def timed_server(request: pytest.FixtureRequest) -> Iterator[str]:
    proc, url = start_timed_server(request.param)
    yield url
    proc.terminate()
    proc.wait(timeout=10)


def run_bench(url: str, kind: str) -> tuple[BenchOutcome, list[dict]]:
    config = BenchConfig(prompt_tokens=PROMPT, output_tokens=OUTPUT, concurrency=(1, 4),
                         runs=3, warmup=1)
    outcome = BenchRunner(url, get_kind(kind), config).run()
    return outcome, httpx.get(url + "/log").json()


def mostly(flags: list[bool]) -> bool:
    """At least three in four: other work on a loaded 2-core machine may delay a process by
    tens of milliseconds now and then, which no client can see past; medians absorb it."""
    return sum(flags) >= 0.75 * len(flags)


# kind "openai" sizes the prompt from usage; "vllm" uses /tokenize, the only count the
# no-usage server offers
CASES = [("usage_end", "openai"), ("role_chunk", "openai"), ("no_usage", "vllm")]


@pytest.mark.parametrize(("timed_server", "kind"), CASES, indirect=["timed_server"],
                         ids=[c[0] for c in CASES])
def test_runner_agrees_with_the_servers_timing(timed_server: str, kind: str) -> None:
    outcome, log = run_bench(timed_server, kind)
    assert outcome.status == "complete", outcome.reason
    assert outcome.plan is not None and outcome.plan.total_tokens == PROMPT
    planned_ttft = PROMPT / PREFILL_RATE
    measured = [r for rnd in outcome.rounds for r in rnd.requests]
    assert len(measured) == 1 * 3 + 4 * 3 and all(r.ok for r in measured)
    first_ok, decode_ok = [], []
    for r in measured:
        sent = min(log, key=lambda e: abs(e["first_sent"] - r.first_at))
        # the first *content* token: a role chunk sent at once would put this ~0.5 s off
        first_ok.append(abs(r.first_at - sent["first_sent"]) < 0.003)
        server_decode = (sent["tokens"] - 1) / (sent["last_sent"] - sent["first_sent"])
        decode_ok.append(abs(r.decode_tps / server_decode - 1) < 0.005)
        assert r.prompt_tokens == PROMPT and r.output_tokens == OUTPUT
        if kind == "vllm":
            assert (r.prompt_source, r.output_source) == ("tokenize", "chunks")
        else:
            assert (r.prompt_source, r.output_source) == ("usage", "usage")
    assert mostly(first_ok) and mostly(decode_ok), (first_ok, decode_ok)
    for point in outcome.points:
        assert point.errors == 0
        assert point.decode_tps.median == pytest.approx(DECODE_RATE, rel=0.005)
        assert point.prefill_tps.median == pytest.approx(PREFILL_RATE, rel=0.01)
        assert abs(point.ttft_s.median - planned_ttft) < 0.003
        server_ttfts = [e["first_sent"] - e["received"] for e in log
                        if any(abs(e["first_sent"] - r.first_at) < 0.1
                               for rnd in outcome.rounds if rnd.concurrency == point.concurrency
                               for r in rnd.requests)]
        assert abs(point.ttft_s.median - statistics.median(server_ttfts)) < 0.003
    single, four = outcome.points
    # four streams at 50 tok/s each: the decode rates add up, the delivered total ~quadruples
    assert four.total_decode_tps.median == pytest.approx(4 * DECODE_RATE, rel=0.01)
    assert four.total_output_tps.median == pytest.approx(
        4 * single.total_output_tps.median, rel=0.05)


@pytest.mark.parametrize("timed_server", ["role_chunk"], indirect=True)
def test_depth_with_prefix_cache_shares_one_context(timed_server: str) -> None:
    config = BenchConfig(prompt_tokens=200, output_tokens=4, concurrency=(2,), runs=1,
                         warmup=0, depth_tokens=300, prefix_cache=True)
    runner = BenchRunner(timed_server, get_kind("openai"), config)
    outcome = runner.run()
    assert outcome.status == "complete", outcome.reason
    assert outcome.plan.context_tokens == 300 and outcome.plan.total_tokens == 500
    assert all(r.prompt_tokens == 500 for rnd in outcome.rounds for r in rnd.requests)
    shared = outcome.plan.messages(1, 7)[0]["content"].split("\n\n")
    other = outcome.plan.messages(2, 7)[0]["content"].split("\n\n")
    assert shared[0] == other[0] and shared[1] != other[1]  # same context, own prompt
    # a priming request went first although no warm-up was asked for
    assert len(httpx.get(timed_server + "/log").json()) == 1 + 2
