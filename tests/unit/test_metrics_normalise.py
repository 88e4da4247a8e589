"""Pure logic: raw samples in, normalised engine numbers out (rates, resets, quantiles).

Bodies are the ones captured from real engines (llama-server b11434, vLLM 0.32 CPU) and, for
SGLang and TensorRT-LLM, bodies written by hand from their documented names (their files
say so); small synthetic bodies pin down one rule each.
"""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from sparkdeck.engines import get_kind
from sparkdeck.engines.ollama import decode_ps
from sparkdeck.metrics.exposition import MalformedMetrics, parse_body
from sparkdeck.metrics.history import MetricsHistory, quantile
from sparkdeck.metrics.mapping import MetricsMap
from sparkdeck.metrics.reader import RawSample
from sparkdeck.metrics.snapshot import NO_MAP, normalise

FIXTURES = Path(__file__).parents[1] / "fixtures" / "metrics"


def raw(text: str | bytes, t: float) -> RawSample:
    body = text.encode() if isinstance(text, str) else text
    return RawSample(parse_body(body), wall=1_800_000_000 + t, monotonic=t)


def history_of(*samples: RawSample) -> MetricsHistory:
    history = MetricsHistory()
    for sample in samples:
        history.add(sample)
    return history


def fixture(name: str) -> bytes:
    return (FIXTURES / name).read_bytes()


def counter(name: str, value: float, labels: str = "") -> str:
    return f"# TYPE {name}_total counter\n{name}_total{labels} {value}\n"


def test_llamacpp_captured_busy_then_after():
    llama = get_kind("llamacpp").metrics_map
    busy, after = (
        raw(fixture("llamacpp-b11434-busy.prom"), 0.0),
        raw(fixture("llamacpp-b11434-after.prom"), 8.0),
    )
    first = normalise(history_of(busy), llama, "llamacpp")
    assert (first.running, first.waiting) == (2, 2)
    assert first.generation_tps is None  # one sample is no rate, not a zero
    m = normalise(history_of(busy, after), llama, "llamacpp", bytes_per_token=2.73e9)
    assert m.generation_tps == pytest.approx(3600 / 8.0)
    assert m.prompt_tps == pytest.approx((58 - 28) / 8.0)
    assert m.stream_tps == pytest.approx(3600 / 7.04557)  # tokens over busy seconds
    assert m.prefix_hit_rate == pytest.approx(54 / (54 + 30))  # cached / all prompt tokens
    assert (m.running, m.waiting) == (0, 0)
    assert m.kv_usage is None and m.ttft_p50_s is None  # llama-server has neither
    assert m.ceiling_tps == pytest.approx(100.0)
    assert m.ceiling_share == pytest.approx(m.stream_tps / 100.0)


def test_counter_reset_counts_from_zero_and_is_flagged():
    vllm = get_kind("vllm").metrics_map
    name = "vllm:generation_tokens"
    h = history_of(raw(counter(name, 1000), 0), raw(counter(name, 1100), 1))
    assert normalise(h, vllm, "vllm").generation_tps == pytest.approx(100)
    h.add(raw(counter(name, 50), 2))  # the engine restarted: 50 new tokens, not -1050
    after_reset = normalise(h, vllm, "vllm")
    assert after_reset.generation_tps == pytest.approx(50) and after_reset.restarted
    h.add(raw(counter(name, 150), 3))
    m = normalise(h, vllm, "vllm")
    assert m.generation_tps == pytest.approx(100) and not m.restarted
    assert m.generation_tps_avg == pytest.approx((100 + 50 + 100) / 3)


def test_label_sets_are_summed():
    vllm = get_kind("vllm").metrics_map

    def body(a: float, b: float) -> str:
        return (
            "# TYPE vllm:generation_tokens_total counter\n"
            f'vllm:generation_tokens_total{{engine="0",model_name="m"}} {a}\n'
            f'vllm:generation_tokens_total{{engine="1",model_name="m"}} {b}\n'
            "# TYPE vllm:num_requests_running gauge\n"
            'vllm:num_requests_running{engine="0",model_name="m"} 3\n'
            'vllm:num_requests_running{engine="1",model_name="m"} 4\n'
        )

    m = normalise(history_of(raw(body(10, 20), 0), raw(body(40, 90), 2)), vllm, "vllm")
    assert m.generation_tps == pytest.approx((30 + 70) / 2)
    assert m.running == 7 and m.models == ("m",)


def test_old_vllm_names_are_read():
    vllm = get_kind("vllm").metrics_map

    def body(itl_sum: float, itl_count: float) -> str:
        return (
            "# TYPE vllm:gpu_cache_usage_perc gauge\nvllm:gpu_cache_usage_perc 0.42\n"
            "# TYPE vllm:time_per_output_token_seconds histogram\n"
            f'vllm:time_per_output_token_seconds_bucket{{le="+Inf"}} {itl_count}\n'
            f"vllm:time_per_output_token_seconds_sum {itl_sum}\n"
            f"vllm:time_per_output_token_seconds_count {itl_count}\n"
        )

    m = normalise(history_of(raw(body(1.0, 100), 0), raw(body(3.0, 200), 1)), vllm, "vllm")
    assert m.kv_usage == pytest.approx(0.42)
    assert m.stream_tps == pytest.approx(100 / 2.0)  # 100 tokens took 2 s: 50 tok/s


def _ttft(counts: list[float]) -> str:
    bounds = ["0.1", "0.5", "1.0", "+Inf"]
    lines = ["# TYPE vllm:time_to_first_token_seconds histogram"]
    lines += [
        f'vllm:time_to_first_token_seconds_bucket{{le="{b}"}} {c}'
        for b, c in zip(bounds, counts, strict=False)
    ]
    lines += [
        f"vllm:time_to_first_token_seconds_count {counts[-1]}",
        "vllm:time_to_first_token_seconds_sum 1",
    ]
    return "\n".join(lines) + "\n"


def test_ttft_quantiles_over_the_last_minute_only():
    vllm = get_kind("vllm").metrics_map
    h = history_of(raw(_ttft([0, 0, 0, 0]), 0))
    # 100 slow requests long ago, then 10 fast ones within the last minute.
    h.add(raw(_ttft([0, 0, 0, 100]), 5))
    h.add(raw(_ttft([0, 0, 0, 100]), 70))
    h.add(raw(_ttft([8, 10, 10, 110]), 75))
    m = normalise(h, vllm, "vllm")
    assert m.ttft_p50_s == pytest.approx(0.1 * 5 / 8)  # inside the first bucket
    assert m.ttft_p90_s == pytest.approx(0.1 + 0.4 * (9 - 8) / 2)


def test_quantile_edges():
    assert quantile(0.5, {}) is None
    assert quantile(0.5, {1.0: 0.0, math.inf: 0.0}) is None
    assert quantile(0.99, {1.0: 1.0, math.inf: 10.0}) == 1.0  # beyond the last bound
    assert quantile(0.5, {0.5: 4.0, 1.0: 4.0, math.inf: 4.0}) == pytest.approx(0.25)


def test_sglang_rate_comes_from_its_live_gauge():
    sglang = get_kind("sglang").metrics_map
    body = fixture("sglang-documented.prom")
    # Counters unchanged between samples (no request ended), yet tokens are flowing.
    m = normalise(history_of(raw(body, 0), raw(body, 1)), sglang, "sglang")
    assert m.generation_tps == pytest.approx(41.5)
    assert (m.running, m.waiting, m.kv_usage) == (3, 1, pytest.approx(0.28))
    assert m.prefix_hit_rate == pytest.approx(0.4)
    assert m.spec_acceptance == pytest.approx(0.75)
    assert m.models == ("Qwen/Qwen3-8B",)


def test_trtllm_documented_names():
    trt = get_kind("trtllm").metrics_map
    body = fixture("trtllm-documented.prom").decode()
    later = (
        body.replace("} 5000.0", "} 5600.0")
        .replace("} 30.0", "} 60.0")
        .replace("} 70.0", "} 80.0")
        .replace("} 400.0", "} 500.0")
        .replace("} 300.0", "} 390.0")
    )
    m = normalise(history_of(raw(body, 0), raw(later, 2)), trt, "trtllm")
    assert m.generation_tps == pytest.approx(300)
    assert (m.running, m.waiting, m.kv_usage) == (4, 2, 0.5)
    assert m.prefix_hit_rate == pytest.approx(30 / 40)  # reused / (reused + missed)
    assert m.spec_acceptance == pytest.approx(90 / 100)


def test_ollama_ps_gives_memory_and_model():
    ollama = get_kind("ollama")
    ps = (
        b'{"models":[{"name":"qwen3:8b","model":"qwen3:8b","size":6000000000,'
        b'"size_vram":5500000000,"expires_at":"2026-11-30T05:00:00Z"}]}'
    )
    sample = RawSample(decode_ps(ps), 1.0, 1.0)
    m = normalise(history_of(sample), ollama.metrics_map, "ollama")
    assert m.memory_bytes == 6e9 and m.gpu_memory_bytes == 5.5e9
    assert m.models == ("qwen3:8b",) and m.generation_tps is None and "per reply" in m.note
    empty = normalise(
        history_of(RawSample(decode_ps(b'{"models":[]}'), 1, 1)), ollama.metrics_map, "ollama"
    )
    assert empty.memory_bytes == 0 and empty.models == ()
    for bad in (b"[]", b'{"models":[{"size":-1}]}', b'{"models":["x"]}', b"\xff"):
        with pytest.raises(MalformedMetrics):
            decode_ps(bad)


def test_a_page_without_the_engines_names_is_not_zeros():
    vllm = get_kind("vllm").metrics_map
    m = normalise(history_of(raw(counter("process_cpu_seconds", 3), 0)), vllm, "vllm")
    assert m.status == NO_MAP and m.generation_tps is None and "none of the metrics" in m.reason


def test_custom_map_from_a_preset_table():
    mapping = get_kind("openai").metrics_map_for(
        {"metrics_map": {"generation_tokens": "atlas:tokens_out_total", "running": "atlas:active"}}
    )
    assert isinstance(mapping, MetricsMap)

    def body(n: float) -> str:
        return counter("atlas:tokens_out", n) + "# TYPE atlas:active gauge\natlas:active 2\n"

    m = normalise(history_of(raw(body(0), 0), raw(body(250), 0.5)), mapping, "openai")
    assert m.generation_tps == pytest.approx(500) and m.running == 2
    assert get_kind("openai").metrics_map_for({"metrics_map": {}}) is None


def test_vllm_captured_idle_during_after():
    vllm = get_kind("vllm").metrics_map
    idle, during, after = (
        raw(fixture(f"vllm-0.32.0-{name}.txt"), t)
        for name, t in (("idle", 0.0), ("during-load", 2.0), ("after-load", 10.0))
    )
    h = history_of(idle, during)
    busy = normalise(h, vllm, "vllm")
    assert (busy.running, busy.waiting) == (2, 0)
    assert busy.kv_usage == pytest.approx(0.00015259254737998162)
    assert busy.generation_tps == pytest.approx(145 / 2.0)
    assert busy.prefix_hit_rate == pytest.approx(256 / 693)
    assert busy.stream_tps == pytest.approx(142 / 0.45849254100039616)
    assert busy.models == ("sparkdeck-tiny",)
    h.add(after)
    done = normalise(h, vllm, "vllm")
    assert done.generation_tps == pytest.approx((1248 - 145) / 8.0)
    assert done.generation_tps_avg == pytest.approx(1248 / 10.0)
    assert (done.running, done.kv_usage) == (0, 0)
    assert done.prefix_hit_rate == pytest.approx(384 / 924)
    assert done.ttft_p50_s is not None and 0 < done.ttft_p50_s <= done.ttft_p90_s
