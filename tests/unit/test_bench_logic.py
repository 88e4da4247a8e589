"""Pure benchmark logic: statistics, figures from timed deltas, prompt sizing, warnings,
and the watchdog's thresholds on benchmark samples."""

from __future__ import annotations

import math

import pytest

from sparkdeck.bench.prompt import chat_messages, filler, fit_words, plan_prompt
from sparkdeck.bench.runner import BenchConfig, check_counts
from sparkdeck.bench.sampler import ResourcePeaks, ResourceSample, fold
from sparkdeck.bench.stats import (
    RequestFigures,
    RoundFigures,
    request_figures,
    summarise,
    summarise_point,
)
from sparkdeck.chat.client import Timed
from sparkdeck.chat.deltas import Content, Done, Finished, Opened, Reasoning, Timings, Usage
from sparkdeck.host.meminfo import MemorySnapshot
from sparkdeck.host.psi import PsiLine, PsiRates, PsiSnapshot

GIB = 2**30


def test_summary_median_and_spread() -> None:
    s = summarise([10.0, None, 14.0, 12.0])
    assert (s.n, s.median, s.minimum, s.maximum) == (3, 12.0, 10.0, 14.0)
    assert s.stdev == pytest.approx(2.0) and s.spread_pct == pytest.approx(100 * 2 / 12)
    assert summarise([5.0]).stdev == 0.0
    assert summarise([None]).median is None


def stream(*items: tuple[float, object]) -> list[Timed]:
    return [Timed(at, delta) for at, delta in items]


def test_figures_start_at_the_first_text_not_at_the_stream_opening() -> None:
    # Opened and Done carry no text; the role-only chunk produced no Content at all
    events = stream(
        (10.001, Opened(200)),
        (10.5, Content("a")),
        (10.6, Content("b")),
        (11.5, Content("c")),
        (11.5, Finished("length")),
        (11.6, Usage(400, 11, 411)),
        (11.6, Done()),
    )
    fig = request_figures(10.0, events, 11.7, prompt_fallback=390, prompt_fallback_source="usage")
    assert fig.ok and fig.ttft_s == pytest.approx(0.5)
    assert fig.decode_tps == pytest.approx(10 / 1.0)  # 11 tokens: 10 after the first, in 1 s
    assert fig.prefill_tps == pytest.approx(400 / 0.5)
    assert (fig.prompt_source, fig.output_source) == ("usage", "usage")
    assert fig.finish_reason == "length"


def test_figures_without_usage_count_text_events_and_reasoning() -> None:
    events = stream(
        (1.2, Reasoning("think")), (1.2, Content("x")), (1.3, Content("y")), (1.4, Content("z"))
    )
    fig = request_figures(1.0, events, 1.5, prompt_fallback=100, prompt_fallback_source="tokenize")
    # one event carried reasoning and content together: it is one token, not two
    assert fig.output_tokens == 3 and fig.output_source == "chunks"
    assert fig.prompt_tokens == 100 and fig.prompt_source == "tokenize"
    assert fig.ttft_s == pytest.approx(0.2) and fig.decode_tps == pytest.approx(2 / 0.2)


def test_cached_prompt_tokens_do_not_count_as_prefill() -> None:
    events = stream(
        (2.0, Content("a")),
        (3.0, Content("b")),
        (3.0, Timings(50, 900, 2, 100, 900)),
        (3.0, Usage(1000, 2, 1002)),
    )
    fig = request_figures(1.0, events, 3.0, prompt_fallback=None, prompt_fallback_source="x")
    assert fig.cached_tokens == 900 and fig.prefill_tps == pytest.approx(100 / 1.0)


def test_a_reply_without_text_is_an_error_not_a_zero() -> None:
    fig = request_figures(
        1.0,
        stream((1.1, Opened(200)), (1.2, Done())),
        1.2,
        prompt_fallback=10,
        prompt_fallback_source="usage",
    )
    assert not fig.ok and "no generated text" in fig.error and fig.ttft_s is None


def figs(sent: float, first: float, last: float, done: float, out: int = 11) -> RequestFigures:
    return RequestFigures(True, None, sent, first, last, done, 100, "usage", out, "usage")


def test_round_totals_and_point_summary() -> None:
    rnd = RoundFigures(2, 0, (figs(0.0, 0.5, 1.5, 1.6), figs(0.0, 0.6, 2.6, 2.7)))
    assert rnd.wall_s == pytest.approx(2.7)
    assert rnd.output_tps == pytest.approx(22 / 2.7)
    assert rnd.decode_sum_tps == pytest.approx(10 / 1.0 + 10 / 2.0)
    failed = RequestFigures(False, "boom", 0.0, None, None, 0.1, None, "usage", None, "chunks")
    point = summarise_point(2, [rnd, RoundFigures(2, 1, (figs(0, 0.5, 1.5, 1.6), failed))])
    assert (point.requests, point.errors) == (4, 1)
    assert point.ttft_s.median == pytest.approx(0.5) and point.total_output_tps.n == 2


def test_filler_permutes_the_same_words() -> None:
    a, b = filler(50, 1).split(), filler(50, 2).split()
    assert a != b and sorted(a) == sorted(b)
    assert filler(50, 1) == filler(50, 1)


@pytest.mark.parametrize("per_word", [1.0, 1.3, 2.0, 0.7])
@pytest.mark.parametrize("target", [100, 513, 4096])
def test_fit_words_finds_the_closest_count_in_few_calls(per_word: float, target: int) -> None:
    calls: list[int] = []

    def count(k: int) -> int:
        calls.append(k)
        return 20 + math.floor(k * per_word)

    words, got = fit_words(count, target)
    best = min(abs(20 + math.floor(k * per_word) - target) for k in range(0, 2 * target))
    assert abs(got - target) == best and got == count(words)
    assert len(calls) <= 8


def test_plan_prompt_sizes_context_and_prompt_with_the_servers_counter() -> None:
    def counter(messages: list[dict[str, str]]) -> int:  # a tokenizer that splits words in two
        return 9 + 2 * len(messages[0]["content"].split())

    plan = plan_prompt(counter, "tokenize", prompt_tokens=300, depth_tokens=1000)
    assert plan.total_tokens in (1299, 1300, 1301) and plan.context_tokens in (999, 1000, 1001)
    assert counter(plan.messages(5, 6)) == plan.total_tokens
    assert chat_messages(0, 0, 0, 0)[0]["role"] == "user"


def test_warnings_name_short_replies_and_miscounted_prompts() -> None:
    cfg = BenchConfig(prompt_tokens=100, output_tokens=11, concurrency=(1,), runs=1)
    plan = plan_prompt(lambda m: 100, "usage", 100)
    short = RequestFigures(
        True, None, 0, 0.1, 0.2, 0.3, 104, "usage", 5, "usage", finish_reason="stop"
    )
    text = " ".join(check_counts(cfg, plan, [RoundFigures(1, 0, (short, figs(0, 0.1, 0.2, 0.3)))]))
    assert "104 prompt tokens" in text
    assert "1 reply ended before 11 tokens (fewest 5; finish reason: stop)" in text
    assert check_counts(cfg, plan, [RoundFigures(1, 0, (figs(0, 0.1, 0.2, 0.3, 11),))]) == []
    alone = RequestFigures(True, None, 0, 0.1, 1.1, 1.2, 100, "usage", 11, "usage")  # 10/s
    burst = RequestFigures(True, None, 0, 0.9, 0.95, 1.0, 100, "usage", 11, "usage")  # 200/s
    steady = RequestFigures(True, None, 0, 0.1, 1.5, 1.6, 100, "usage", 11, "usage")
    [text] = check_counts(
        cfg, plan, [RoundFigures(1, 0, (alone,)), RoundFigures(2, 0, (burst, steady))]
    )
    assert text.startswith("1 of 3 replies arrived in bursts")


def memory(available_gib: float, total_gib: float = 128.0) -> MemorySnapshot:
    # a Spark-sized memory picture: a fake, since no Spark is here
    return MemorySnapshot(int(total_gib * GIB), int(available_gib * GIB), 0, 0, 0, 0, 0)


def psi(avg10: float, t: float) -> PsiSnapshot:
    return PsiSnapshot(PsiLine(avg10, 0, 0, 0), PsiLine(avg10 / 2, 0, 0, 0), t)


def test_peaks_keep_the_extremes() -> None:
    peaks = ResourcePeaks()
    for avail, pressure, rate in ((100, 1.0, None), (60, 9.0, 3.0), (80, 2.0, 1.0)):
        peaks = fold(
            peaks,
            ResourceSample(
                0, memory(avail), psi(pressure, 0), PsiRates(rate, rate, 0.25) if rate else None
            ),
        )
    assert peaks.samples == 3 and peaks.min_available_bytes == 60 * GIB
    assert peaks.peak_used_bytes == 68 * GIB and peaks.max_some_avg10 == 9.0
    assert peaks.max_full_avg10 == 4.5 and peaks.max_full_rate_pct == 3.0


def test_padding_lands_on_the_exact_count_when_words_cost_several_tokens() -> None:
    def counter(messages: list[dict[str, str]]) -> int:  # a tiny vocabulary: one token a letter
        return 11 + sum(len(w) for w in messages[0]["content"].split())

    for target in (200, 201, 517):
        plan = plan_prompt(counter, "tokenize", prompt_tokens=target)
        assert plan.total_tokens == target and counter(plan.messages(3, 4)) == target
        assert plan.pad.startswith(" a") or plan.pad == ""
