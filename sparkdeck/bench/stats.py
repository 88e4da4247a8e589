"""Benchmark statistics: per-request timing figures and their median and spread.

Pure logic: it takes the timestamped deltas one streamed request produced (from
sparkdeck.chat) and the token counts the server (or a fallback) reported, and returns frozen
figures; it never talks to a server. TTFT runs from the moment the request was sent to the
first event that carried generated text; a role-only or empty chunk carries no text and is
never counted (the chat client yields no Content for it). Reasoning text counts as
generated: a thinking model's first token is a token the engine decoded.
"""

from __future__ import annotations

import math
import re
import statistics
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from sparkdeck.chat.client import Timed
from sparkdeck.chat.deltas import Content, Finished, Reasoning, Timings, Usage


@dataclass(frozen=True)
class Summary:
    """Median and spread of one figure over requests or repeats (None when nothing counted)."""

    n: int
    median: float | None
    stdev: float | None
    minimum: float | None
    maximum: float | None

    @property
    def spread_pct(self) -> float | None:
        """Standard deviation as a share of the median: how much to trust the median."""
        if self.stdev is None or not self.median:
            return None
        return 100.0 * self.stdev / self.median

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def summarise(values: Iterable[float | None]) -> Summary:
    """Median, sample standard deviation (0 for one value), min and max of the known values."""
    known = [float(v) for v in values if v is not None]
    if not known:
        return Summary(0, None, None, None, None)
    stdev = statistics.stdev(known) if len(known) > 1 else 0.0
    return Summary(len(known), statistics.median(known), stdev, min(known), max(known))


@dataclass(frozen=True)
class RequestFigures:
    """What one streamed request measured. Times are time.perf_counter() seconds.

    `first_at`/`last_at` are the first and last chunks that carried generated text (content
    or reasoning); a role-only or empty chunk never counts. Token counts say where they came
    from ("usage" from the server, "tokenize" from its tokenizer endpoint, "chunks" counted
    one per streamed chunk, "target" when nothing better was known).
    """

    ok: bool
    error: str | None
    sent_at: float
    first_at: float | None
    last_at: float | None
    done_at: float
    prompt_tokens: int | None
    prompt_source: str
    output_tokens: int | None
    output_source: str
    cached_tokens: int = 0
    text_chunks: int = 0
    finish_reason: str | None = None  # the server's own: "length", "stop", ...
    first_batch: int = 1  # text chunks read off the socket together with the first one
    last_batch: int = 1  # ... and with the last one
    server_decode_tps: float | None = None  # the server's own (llama.cpp `timings`)
    server_prefill_tps: float | None = None

    @property
    def ttft_s(self) -> float | None:
        return None if self.first_at is None else self.first_at - self.sent_at

    @property
    def decode_tps(self) -> float | None:
        """Tokens after the first, over the time from the first to the last generated token.

        Chunks read off the socket together share the stamp of the newest bytes among them:
        when the first token came with others, the time is right for the last of that batch,
        so the count runs from there (in proportion when a chunk is not one token)."""
        if (
            self.first_at is None
            or self.last_at is None
            or not self.output_tokens
            or self.output_tokens < 2
            or self.last_at <= self.first_at
        ):
            return None
        if self.last_batch > 1 and 2 * self.last_batch > self.text_chunks - self.first_batch:
            # Most of the reply came in its last read (the client or a proxy fell behind):
            # the time from the first read to that one says when the bytes were delivered,
            # not how fast they were decoded. Counted, this gave 1,023 tokens over the few
            # microseconds between two reads: 300k tok/s, and a spread of ±340,499.
            return None
        after: float = self.output_tokens - 1
        if self.text_chunks > 1 and self.first_batch > 1:
            after *= (self.text_chunks - self.first_batch) / (self.text_chunks - 1)
        return after / (self.last_at - self.first_at)

    @property
    def prefill_tps(self) -> float | None:
        """Prompt tokens the server had to process (cached ones excluded) over the TTFT."""
        ttft = self.ttft_s
        if ttft is None or ttft <= 0 or not self.prompt_tokens:
            return None
        processed = self.prompt_tokens - self.cached_tokens
        return processed / ttft if processed > 0 else None

    @property
    def e2e_s(self) -> float:
        return self.done_at - self.sent_at

    def to_dict(self) -> dict[str, Any]:
        return {
            **asdict(self),
            "ttft_s": self.ttft_s,
            "decode_tps": self.decode_tps,
            "prefill_tps": self.prefill_tps,
            "e2e_s": self.e2e_s,
        }


@dataclass(frozen=True)
class RoundFigures:
    """One repeat at one concurrency: `concurrency` requests sent together."""

    concurrency: int
    repeat: int
    requests: tuple[RequestFigures, ...]

    @property
    def ok_requests(self) -> list[RequestFigures]:
        return [r for r in self.requests if r.ok]

    @property
    def wall_s(self) -> float | None:
        done = self.ok_requests
        if not done:
            return None
        return max(r.done_at for r in done) - min(r.sent_at for r in self.requests)

    @property
    def output_tps(self) -> float | None:
        """All generated tokens of the round over its wall time: what the engine delivered."""
        wall = self.wall_s
        tokens = sum(r.output_tokens or 0 for r in self.ok_requests)
        return tokens / wall if wall and tokens else None

    @property
    def decode_sum_tps(self) -> float | None:
        """Per-request decode rates added up: the engine's decode throughput while all ran."""
        rates = [r.decode_tps for r in self.ok_requests if r.decode_tps is not None]
        return sum(rates) if rates else None


@dataclass(frozen=True)
class PointSummary:
    """Figures for one concurrency level over all its repeats (per request and in total)."""

    concurrency: int
    requests: int
    errors: int
    prompt_tokens: Summary
    output_tokens: Summary
    ttft_s: Summary
    decode_tps: Summary
    prefill_tps: Summary
    e2e_s: Summary
    total_output_tps: Summary
    total_decode_tps: Summary
    # the server's own per-request figures where it reports them (llama.cpp `timings`)
    server_decode_tps: Summary = field(default_factory=lambda: summarise(()))
    server_prefill_tps: Summary = field(default_factory=lambda: summarise(()))
    # the server's own means over the level from its latency histograms (vLLM, SGLang, ...)
    server_ttft_s: float | None = None
    server_stream_decode_tps: float | None = None
    # the commonest error of the level in the engine's own words, and how many said it
    error_message: str | None = None
    error_count: int = 0

    def to_dict(self) -> dict[str, Any]:
        return {
            k: (v.to_dict() if isinstance(v, Summary) else v)
            for k, v in ((f, getattr(self, f)) for f in self.__dataclass_fields__)
        }


def summarise_point(concurrency: int, rounds: Sequence[RoundFigures]) -> PointSummary:
    """Per-request figures over every request of every repeat; totals over the repeats."""
    reqs = [r for rnd in rounds for r in rnd.requests]
    ok = [r for r in reqs if r.ok]
    return PointSummary(
        concurrency=concurrency,
        requests=len(reqs),
        errors=len(reqs) - len(ok),
        prompt_tokens=summarise(r.prompt_tokens for r in ok),
        output_tokens=summarise(r.output_tokens for r in ok),
        ttft_s=summarise(r.ttft_s for r in ok),
        decode_tps=summarise(r.decode_tps for r in ok),
        prefill_tps=summarise(r.prefill_tps for r in ok),
        e2e_s=summarise(r.e2e_s for r in ok),
        total_output_tps=summarise(rnd.output_tps for rnd in rounds),
        total_decode_tps=summarise(rnd.decode_sum_tps for rnd in rounds),
        server_decode_tps=summarise(r.server_decode_tps for r in ok),
        server_prefill_tps=summarise(r.server_prefill_tps for r in ok),
        **commonest_error(reqs),
    )


def commonest_error(requests: Sequence[RequestFigures]) -> dict[str, Any]:
    """The error most requests of a level ended with (the engine's message, e.g. "Context
    size has been exceeded"), for a line that says why, not just a count."""
    said = Counter(r.error for r in requests if r.error)
    if not said:
        return {}
    message, count = said.most_common(1)[0]
    return {"error_message": message, "error_count": count}


# How engines say a request does not fit the context they have left: llama.cpp (slots
# share it) "Context size has been exceeded", vLLM "maximum context length", OpenAI's
# "context_length_exceeded"; the benchmark can only get worse at higher concurrency.
_CONTEXT_REFUSED = re.compile(
    r"context size has been exceeded|maximum context length|"
    r"context_length_exceeded|exceeds the available context",
    re.IGNORECASE,
)


def refuses_context(point: PointSummary) -> bool:
    return bool(point.error_message and _CONTEXT_REFUSED.search(point.error_message))


def errors_reason(points: list[PointSummary], asked: tuple[int, ...]) -> str | None:
    """Why a run with failed requests is not complete: each level's count and the engine's
    own words; and, when the sweep stopped at a refused context, the levels not tried."""
    failed = [p for p in points if p.errors]
    if not failed:
        return None
    parts = [
        f"c={p.concurrency}: {p.errors} of {p.requests} requests failed"
        + (f" ({p.error_message})" if p.error_message else "")
        for p in failed
    ]
    skipped = [c for c in asked if c > points[-1].concurrency]
    if skipped and refuses_context(points[-1]):
        parts.append(
            f"the engine refused the context at c={points[-1].concurrency}, so "
            f"c={', '.join(map(str, skipped))} {'was' if len(skipped) == 1 else 'were'}"
            " not tried"
        )
    return "; ".join(parts)


# A reply that reached the client in less time than the server spent generating it was
# delivered in bursts (a client, proxy or HTTP layer that fell behind): this much (or 20 ms,
# for short replies' jitter) is allowed before a reply counts as such.
BEHIND_SHARE = 0.2
BEHIND_MIN_S = 0.02


def fell_behind(rounds: Sequence[RoundFigures]) -> list[str]:
    """Reasons to distrust the client's decode figures of a run: replies that reached it in
    less time than the server's own timings (llama.cpp `timings`) say it spent generating
    them. Their rates then measure delivery, not decoding (the issue's vLLM case: 3.4k-27k
    tok/s by the client against ~500 by the server)."""
    ok = [r for rnd in rounds for r in rnd.requests if r.ok]
    squeezed = []
    for r in ok:
        if (
            r.server_decode_tps
            and r.output_tokens
            and r.output_tokens > 1
            and r.first_at is not None
            and r.last_at is not None
        ):
            server_s = r.output_tokens / r.server_decode_tps
            if server_s - (r.last_at - r.first_at) > max(BEHIND_SHARE * server_s, BEHIND_MIN_S):
                squeezed.append(r)
    if not squeezed:
        return []
    worst = max(squeezed, key=lambda r: (r.decode_tps or math.inf) / (r.server_decode_tps or 1))
    seen = f"{worst.decode_tps:,.0f} tok/s" if worst.decode_tps is not None else "all at once"
    return [
        f"{len(squeezed)} of {len(ok)} replies reached the client in less time than the "
        f"server spent generating them (e.g. {seen} by the client's clock, "
        f"{worst.server_decode_tps:,.0f} tok/s by the server's): delivered in bursts, "
        "their decode rates measure delivery, not decoding"
    ]


def request_figures(
    sent_at: float,
    events: Iterable[Timed],
    done_at: float,
    *,
    prompt_fallback: int | None,
    prompt_fallback_source: str,
    error: str | None = None,
) -> RequestFigures:
    """Figures from the events one request produced (consumed here, in order).

    Token counts prefer the server's `usage`; without it the prompt count is the one the
    prompt was sized with, and the output count is the number of events that carried text
    (engines stream one token per event unless told otherwise).
    """
    first_at: float | None = None
    last_at: float | None = None
    text_events: dict[tuple[int, float], float] = {}  # one event may carry reasoning and content
    usage: Usage | None = None
    timings: Timings | None = None
    finish: str | None = None
    for timed in events:
        delta = timed.delta
        if isinstance(delta, (Content, Reasoning)) and delta.text:
            if first_at is None:
                first_at = timed.at
            last_at = timed.at
            text_events[(timed.event, timed.at)] = timed.at
        elif isinstance(delta, Usage):
            usage = delta  # the last one wins: vLLM's continuous stats grow per chunk
        elif isinstance(delta, Timings):
            timings = delta
        elif isinstance(delta, Finished):
            finish = delta.reason
    stamps = list(text_events.values())
    cached = timings.cache_n or 0 if timings is not None else 0
    prompt, prompt_source = prompt_fallback, prompt_fallback_source
    if usage is not None and usage.prompt_tokens is not None:
        prompt, prompt_source = usage.prompt_tokens, "usage"
    output, output_source = (len(text_events) or None), "chunks"
    if usage is not None and usage.completion_tokens is not None:
        output, output_source = usage.completion_tokens, "usage"
    return RequestFigures(
        ok=error is None and first_at is not None,
        error=error
        if error is not None
        else (None if first_at is not None else "the reply carried no generated text"),
        sent_at=sent_at,
        first_at=first_at,
        last_at=last_at,
        done_at=done_at,
        prompt_tokens=prompt,
        prompt_source=prompt_source,
        output_tokens=output,
        output_source=output_source,
        cached_tokens=min(cached, prompt or 0),
        text_chunks=len(text_events),
        finish_reason=finish,
        first_batch=stamps.count(first_at) if stamps and first_at is not None else 1,
        last_batch=stamps.count(last_at) if stamps and last_at is not None else 1,
        server_decode_tps=timings.predicted_per_second if timings else None,
        server_prefill_tps=timings.prompt_per_second if timings else None,
    )
