"""The /metrics captures from a real vLLM (tests/fixtures/metrics) are whole and consistent.

Other tests replay these files instead of starting vLLM; these checks make sure a capture
is what tools/capture_vllm_metrics.py says it is: idle, two requests streaming, and after
four requests (32 + 600 + 600 + 16 generated tokens), all from one server and one version.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

FIXTURES = Path(__file__).parents[1] / "fixtures" / "metrics"
VERSION = json.loads((FIXTURES / "vllm-0.32.0-version.json").read_text())["version"]
PHASES = ("idle", "during-load", "after-load")


def _samples(phase: str) -> dict[str, float]:
    """vLLM's samples of one capture by name, labels summed away."""
    text = (FIXTURES / f"vllm-{VERSION}-{phase}.txt").read_text()
    found: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name.startswith("vllm:"):
                found[sample.name] = found.get(sample.name, 0.0) + sample.value
    return found


@pytest.fixture(scope="module")
def captures() -> dict[str, dict[str, float]]:
    return {phase: _samples(phase) for phase in PHASES}


def test_version_and_file_names_agree():
    assert VERSION == "0.32.0"
    names = {p.name for p in FIXTURES.glob("vllm-*")}
    assert names >= {f"vllm-{VERSION}-{phase}.txt" for phase in PHASES}


def test_every_capture_has_the_same_series(captures):
    idle, during, after = (set(captures[p]) for p in PHASES)
    assert idle == during == after
    for name in (
        "vllm:generation_tokens_total",
        "vllm:prompt_tokens_total",
        "vllm:num_requests_running",
        "vllm:num_requests_waiting",
        "vllm:kv_cache_usage_perc",
        "vllm:prefix_cache_queries_total",
        "vllm:prefix_cache_hits_total",
        "vllm:time_to_first_token_seconds_count",
        "vllm:inter_token_latency_seconds_count",
    ):
        assert name in idle, name
    assert "vllm:gpu_cache_usage_perc" not in idle  # renamed before 0.32 (SPARK.md)


def test_phases_show_what_the_tool_did(captures):
    idle, during, after = (captures[p] for p in PHASES)
    assert idle["vllm:generation_tokens_total"] == 0
    assert during["vllm:num_requests_running"] == 2 and during["vllm:kv_cache_usage_perc"] > 0
    assert after["vllm:generation_tokens_total"] == 32 + 600 + 600 + 16
    assert after["vllm:time_to_first_token_seconds_count"] == 4
    assert after["vllm:num_requests_running"] == 0
    assert 0 < after["vllm:prefix_cache_hits_total"] < after["vllm:prefix_cache_queries_total"]


def test_counters_never_go_back(captures):
    idle, during, after = (captures[p] for p in PHASES)
    counters = [n for n in idle if n.endswith(("_total", "_count", "_sum"))]
    assert len(counters) > 20
    for name in counters:
        assert idle[name] <= during[name] <= after[name], name
