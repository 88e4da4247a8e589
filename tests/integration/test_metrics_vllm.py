"""sparkdeck's engine numbers against a real vLLM (CPU build, tiny model) under load.

Slow tier (marker `vllm`): runs under .ci/run, skipped locally when the vLLM venv is absent.
A server of this module's own runs with --max-num-seqs 2, so six concurrent streams must
queue: `waiting` has to move, not only `running`. The tiny model runs at ~700 tok/s on a quiet
machine: 6 x 500 tokens keep the load going for many 0.2 s samples, also when a busy
machine makes vLLM deliver its steps in bursts (6 x 300 once showed no running request).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from sparkdeck.engines import get_kind
from tests.support.engine_load import observe_load, server_counter
from tests.support.vllm_server import VllmServer, running_vllm

pytestmark = pytest.mark.vllm
TOKENS = "vllm:generation_tokens_total"


@pytest.fixture(scope="module")
def queueing_vllm(
    vllm_python: Path, tiny_hf_model: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[VllmServer]:
    log = tmp_path_factory.mktemp("vllm-metrics") / "server.log"
    with running_vllm(vllm_python, tiny_hf_model, log, extra=("--max-num-seqs", "2")) as server:
        yield server


@pytest.mark.anyio
async def test_tok_s_queue_kv_and_ttft_agree_with_vllm(queueing_vllm: VllmServer):
    server = queueing_vllm
    plan = get_kind("vllm").metrics_plan(server.base_url, "/metrics")
    before = {
        name: server_counter(server.base_url, name)
        for name in (TOKENS, "vllm:prefix_cache_hits_total", "vllm:prefix_cache_queries_total")
    }
    seen = await observe_load(
        plan,
        server.base_url,
        server.model,
        streams=6,
        max_tokens=500,
        period_s=0.2,
        settle_s=120,
    )
    after = {name: server_counter(server.base_url, name) for name in before}

    assert seen.load.errors == [] and seen.load.streams_ok == 6
    counted = after[TOKENS] - before[TOKENS]
    assert counted == seen.load.completion_tokens == 6 * 500
    ours, theirs = seen.rates_over_window(counted)
    assert abs(ours - theirs) <= 0.02 * theirs, (ours, theirs)

    # --max-num-seqs 2: readings taken while two streams were mid-reply must see both
    assert seen.in_flight, "no reading while two streams were mid-reply"
    assert seen.peak("running") == 2
    assert seen.peak("waiting") >= 1
    assert seen.peak("kv_usage") > 0
    final = seen.answered()[-1]
    assert (final.running, final.waiting, final.kv_usage) == (0, 0, 0)
    # TTFT from the histogram over the last minute, and the decode speed from 1/ITL.
    assert final.ttft_p50_s is not None and 0 < final.ttft_p50_s <= final.ttft_p90_s
    assert final.stream_tps is not None and final.stream_tps > 0
    queries = after["vllm:prefix_cache_queries_total"] - before["vllm:prefix_cache_queries_total"]
    hits = after["vllm:prefix_cache_hits_total"] - before["vllm:prefix_cache_hits_total"]
    assert queries > 0 and final.prefix_hit_rate == pytest.approx(hits / queries)
    assert final.models == (server.model,)
