"""The server's own figures from its latency histograms beside the client's, and a run whose
tokens reached the client in bursts marked unreliable on that evidence (issue 12, item 2:
vLLM decode at c=1 came out 3.4k-27k tok/s against ~500 by the server, stored as complete).

Readings: /metrics bodies captured from the real vLLM 0.32.0 (tests/fixtures/metrics), and the
timed loopback server (its own process), whose /metrics counts what it really generated.
"""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest

from sparkdeck.bench.server_side import (
    HistogramTotals,
    burst_reason,
    read_totals,
    totals_from,
    window,
)
from sparkdeck.bench.stats import BEHIND_SHARE, RequestFigures
from sparkdeck.engines import get_kind
from sparkdeck.metrics.exposition import parse_body
from tests.support.cli import sparkdeck
from tests.support.timed_server import running

FIXTURES = Path(__file__).parents[1] / "fixtures" / "metrics"
VLLM_MAP = get_kind("vllm").metrics_map


def test_a_level_between_two_real_vllm_scrapes() -> None:
    during = totals_from(
        parse_body((FIXTURES / "vllm-0.32.0-during-load.txt").read_bytes()), VLLM_MAP
    )
    after = totals_from(
        parse_body((FIXTURES / "vllm-0.32.0-after-load.txt").read_bytes()), VLLM_MAP
    )
    level = window(during, after)
    assert level is not None and level.requests == 1
    # by hand from the two bodies: TTFT (0.056386709 - 0.049031496) / (4 - 3) s,
    # inter-token latency (3.801841293 - 0.458492541) / (1244 - 142) s per token
    assert level.ttft_s == pytest.approx(0.0073552, rel=1e-4)
    assert level.stream_decode_tps == pytest.approx(1102 / 3.3433488, rel=1e-4)


def test_nothing_counted_or_a_restart_gives_no_figure() -> None:
    idle = HistogramTotals(0.0, 0.0, 0.0, 0.0)
    assert window(idle, idle) is None
    assert window(HistogramTotals(5.0, 10.0, 9.0, 900.0), idle) is None  # counters went down
    assert window(None, idle) is None and window(idle, None) is None
    ttft_only = window(idle, HistogramTotals(0.2, 2.0, None, None))
    assert ttft_only is not None and ttft_only.ttft_s == pytest.approx(0.1)
    assert ttft_only.stream_decode_tps is None


def _reply(first_at: float, last_at: float, tokens: int = 101) -> RequestFigures:
    return RequestFigures(
        ok=True,
        error=None,
        sent_at=0.0,
        first_at=first_at,
        last_at=last_at,
        done_at=last_at,
        prompt_tokens=10,
        prompt_source="usage",
        output_tokens=tokens,
        output_source="usage",
        text_chunks=tokens,
    )


def test_bursts_are_judged_against_the_servers_own_rate() -> None:
    # 100 tokens after the first at 500 tok/s take the server 0.2 s; 20 % off is allowed
    assert burst_reason(1, [_reply(1.0, 1.0 + 0.2 * (1 - BEHIND_SHARE))], 500.0) is None
    reason = burst_reason(1, [_reply(1.0, 1.0 + 0.2 * (1 - BEHIND_SHARE) - 0.001)], 500.0)
    assert reason is not None and "concurrency 1, 1 of 1 replies" in reason
    assert "all at once" in burst_reason(4, [_reply(1.0, 1.0)], 500.0)
    assert burst_reason(2, [_reply(1.0, 1.0)], None) is None  # no server figure, no verdict
    short = _reply(1.0, 1.0, tokens=3)  # 2 tokens: 4 ms by the server, within the jitter
    assert burst_reason(1, [short], 500.0) is None


def test_read_totals_scrapes_and_survives_a_bad_body() -> None:
    with running("usage_end", 20000.0, 400.0) as url, httpx.Client() as http:
        fresh = read_totals(http, url + "/metrics", VLLM_MAP)
        assert fresh == HistogramTotals(0.0, 0.0, 0.0, 0.0)
        assert read_totals(http, url + "/nothing-here", VLLM_MAP) is None
        assert read_totals(http, "http://127.0.0.1:9/metrics", VLLM_MAP) is None


def _bench(url: str, dirs: dict[str, Path]):
    return sparkdeck(
        "bench",
        "--endpoint",
        url,
        "--kind",
        "vllm",
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
        env_dirs=dirs,
    )


def _stored(dirs: dict[str, Path]) -> dict:
    (run,) = json.loads(sparkdeck("bench", "history", "--json", env_dirs=dirs).stdout)["runs"]
    return run


def test_a_burst_with_only_histograms_makes_the_run_unreliable(isolated_dirs) -> None:
    with running("burst_histograms", 20000.0, 400.0) as url:
        done = _bench(url, isolated_dirs)
    assert done.returncode == 0, done.stderr
    assert "server's own (latency histograms, mean over the level): c=1" in done.stdout
    run = _stored(isolated_dirs)
    assert run["status"] == "unreliable", run
    assert "inter-token latency histogram" in run["reason"] and "all at once" in run["reason"]
    point = run["points"][0]["summary"]
    assert point["server_stream_decode_tps"] == pytest.approx(400.0, rel=0.1)


def test_a_steady_server_is_complete_with_its_own_figures_beside(isolated_dirs) -> None:
    with running("usage_end", 20000.0, 400.0) as url:
        done = _bench(url, isolated_dirs)
    assert done.returncode == 0, done.stderr
    run = _stored(isolated_dirs)
    assert run["status"] == "complete", run["reason"]
    point = run["points"][0]["summary"]
    assert point["server_stream_decode_tps"] == pytest.approx(400.0, rel=0.1)
    assert point["decode_tps"]["median"] == pytest.approx(400.0, rel=0.1)
    # each request's TTFT by the server (received to first token sent) is below the client's
    # (sent to first token read), so their mean is below the client's largest; not below its
    # median: one slow request on a busy machine lifts a mean and leaves a median alone
    assert 0 < point["server_ttft_s"] <= point["ttft_s"]["maximum"]
