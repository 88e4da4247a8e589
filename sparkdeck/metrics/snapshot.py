"""The normalised engine numbers sparkdeck shows, computed from a history of raw samples.

Pure logic: `normalise` takes a `MetricsHistory`, the engine's `MetricsMap` and the
preset's bytes-per-token figure and returns a frozen `EngineMetrics`; `unavailable` turns a
scrape that produced no sample into one that says why. A number the engine does not report
is None ("n/a" on screen), never 0.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any

from sparkdeck.metrics.exposition import Families, total
from sparkdeck.metrics.history import MetricsHistory, quantile
from sparkdeck.metrics.mapping import MetricsMap
from sparkdeck.metrics.reader import MetricsOff, ScrapeResult, Unreachable

# DGX Spark: 128 GB LPDDR5x, 256-bit at 8533 MT/s (SPARK.md). One decode step of one stream
# reads every active weight once, so tok/s <= bandwidth / bytes per token.
SPARK_BANDWIDTH_BYTES_S = 273e9
# llama.cpp's counters move when a request ends: over one second they jump, over a minute
# they average out.
AVERAGE_WINDOW_S = 60.0

OK, OFF, UNREACHABLE, INVALID, NO_MAP = "ok", "metrics-off", "unreachable", "invalid", "no-map"


@dataclass(frozen=True)
class EngineMetrics:
    """One normalised reading of an engine's own numbers; None means "not reported"."""

    kind: str
    status: str  # ok, metrics-off, unreachable, invalid, no-map
    wall: float
    reason: str | None = None  # why status is not ok, or the hint to switch metrics on
    generation_tps: float | None = None  # tokens/s generated, all streams, last interval
    generation_tps_avg: float | None = None  # the same over the last minute
    prompt_tps: float | None = None
    stream_tps: float | None = None  # decode speed of one stream (busy time or 1/ITL)
    running: float | None = None
    waiting: float | None = None
    kv_usage: float | None = None  # 0-1
    prefix_hit_rate: float | None = None  # 0-1
    ttft_p50_s: float | None = None
    ttft_p90_s: float | None = None
    spec_acceptance: float | None = None  # 0-1
    memory_bytes: float | None = None
    gpu_memory_bytes: float | None = None
    ceiling_tps: float | None = None  # the bandwidth ceiling for one stream
    ceiling_share: float | None = None  # stream_tps (or generation_tps) / ceiling_tps
    restarted: bool = False  # a counter went down since the previous sample
    models: tuple[str, ...] = ()  # model names the engine labels its series with
    note: str = ""  # what this engine cannot report, from its map
    late: bool = False  # the answer came well after this reading's tick (or never)
    scrape_s: float | None = None  # how long the scrape took

    @property
    def ok(self) -> bool:
        return self.status == OK

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def ceiling_tps(bytes_per_token: float | None) -> float | None:
    """The Spark's bandwidth ceiling for one stream, or None when the preset does not say."""
    if not bytes_per_token or bytes_per_token <= 0:
        return None
    return SPARK_BANDWIDTH_BYTES_S / bytes_per_token


def _finite(value: float | None, low: float = 0.0, high: float = math.inf) -> float | None:
    if value is None or not math.isfinite(value):
        return None
    return min(max(value, low), high)


def _fraction(value: float | None) -> float | None:
    return _finite(value, 0.0, 1.0)


def _prefix_rate(history: MetricsHistory, m: MetricsMap) -> float | None:
    latest = history.latest
    assert latest is not None
    if m.prefix_hits and m.prefix_queries:
        found = history.ratio(m.prefix_hits, m.prefix_queries, AVERAGE_WINDOW_S)
        if found is not None:
            return found
    if m.prefix_hits and m.prefix_misses:
        hits = history.increase(m.prefix_hits, AVERAGE_WINDOW_S)
        misses = history.increase(m.prefix_misses, AVERAGE_WINDOW_S)
        if hits is not None and misses is not None and hits[0] + misses[0] > 0:
            return hits[0] / (hits[0] + misses[0])
    return _fraction(total(latest.families, m.prefix_hit_rate_gauge))


def _stream_tps(history: MetricsHistory, m: MetricsMap) -> float | None:
    if m.generation_seconds:
        tokens = history.increase(m.generation_tokens, AVERAGE_WINDOW_S)
        busy = history.increase(m.generation_seconds, AVERAGE_WINDOW_S)
        if tokens is not None and busy is not None and busy[0] > 0:
            return tokens[0] / busy[0]
    itl = history.histogram_mean(m.itl_histogram, AVERAGE_WINDOW_S)
    return 1.0 / itl if itl else None


def _models(families: Families, m: MetricsMap) -> tuple[str, ...]:
    for names in (m.memory_bytes, m.running, m.generation_tokens):
        for name in names:
            if name in families:
                found = {
                    value
                    for labels, _ in families[name].values
                    for key, value in labels
                    if key in ("model", "model_name")
                }
                return tuple(sorted(found))
    return ()


def normalise(
    history: MetricsHistory, m: MetricsMap, kind: str, bytes_per_token: float | None = None
) -> EngineMetrics:
    """The engine's numbers from the samples in `history` (its latest sample must be ok)."""
    latest = history.latest
    if latest is None:
        raise ValueError("normalise needs at least one sample")
    families = latest.families
    if not m.all_names() & set(families):
        return EngineMetrics(
            kind,
            NO_MAP,
            latest.wall,
            reason=(
                "the endpoint answers but has none of the metrics sparkdeck reads for this engine"
            ),
        )
    last = history.increase(m.generation_tokens, 0)
    gauge = total(families, m.generation_rate_gauge)
    generation = gauge if gauge is not None else history.rate(m.generation_tokens, 0)
    ttft = history.histogram_increments(m.ttft_histogram, AVERAGE_WINDOW_S)
    stream = _finite(_stream_tps(history, m))
    running = _finite(total(families, m.running))
    spec = (
        history.ratio(m.spec_accepted, m.spec_drafted, AVERAGE_WINDOW_S)
        if m.spec_accepted and m.spec_drafted
        else None
    )
    if spec is None:
        spec = _fraction(total(families, m.spec_accept_rate_gauge))
    ceiling = ceiling_tps(bytes_per_token)
    generation = _finite(generation)
    # One stream's speed is what the ceiling bounds; with one request running the total
    # rate is that stream's speed.
    measured = (
        stream
        if stream is not None
        else (generation if running is not None and running <= 1 else None)
    )
    return EngineMetrics(
        kind=kind,
        status=OK,
        wall=latest.wall,
        generation_tps=generation,
        generation_tps_avg=_finite(history.rate(m.generation_tokens, AVERAGE_WINDOW_S)),
        prompt_tps=_finite(history.rate(m.prompt_tokens, 0)),
        stream_tps=stream,
        running=running,
        waiting=_finite(total(families, m.waiting)),
        kv_usage=_fraction(total(families, m.kv_usage)),
        prefix_hit_rate=_fraction(_prefix_rate(history, m)),
        ttft_p50_s=_finite(quantile(0.5, ttft)) if ttft else None,
        ttft_p90_s=_finite(quantile(0.9, ttft)) if ttft else None,
        spec_acceptance=spec,
        memory_bytes=_finite(total(families, m.memory_bytes)),
        gpu_memory_bytes=_finite(total(families, m.gpu_memory_bytes)),
        ceiling_tps=ceiling,
        ceiling_share=(measured / ceiling if ceiling and measured is not None else None),
        restarted=bool(last and last[2]),
        models=_models(families, m),
        note=m.note,
    )


def unavailable(kind: str, result: ScrapeResult) -> EngineMetrics:
    """An EngineMetrics that says why no numbers could be read this time."""
    if isinstance(result, MetricsOff):
        return EngineMetrics(kind, OFF, result.wall, reason=result.hint)
    if isinstance(result, Unreachable):
        return EngineMetrics(kind, UNREACHABLE, result.wall, reason=result.reason)
    return EngineMetrics(kind, INVALID, result.wall, reason=getattr(result, "reason", None))
