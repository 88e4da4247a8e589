"""The server's own view of a benchmark level, from its latency histograms (vLLM, SGLang,
TensorRT-LLM): mean time to first token and mean inter-token latency over exactly the
requests of that level, from the histograms' `_sum`/`_count` before and after it.

Why: a client that falls behind (a starved CPU, a proxy that batches) sees tokens arrive in
bursts and computes decode rates of thousands of tok/s for a server doing ~500. llama.cpp
reports its own speed per reply (`timings`); engines with Prometheus histograms report it
per level. Comparing the two is how a run is found unreliable, and showing both is how a
user sees which figure to trust.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import httpx

from sparkdeck.bench.stats import BEHIND_MIN_S, BEHIND_SHARE, RequestFigures
from sparkdeck.metrics.exposition import Families, MalformedMetrics, parse_body, total
from sparkdeck.metrics.mapping import MetricsMap

SCRAPE_TIMEOUT_S = 5.0


@dataclass(frozen=True)
class HistogramTotals:
    """Cumulative sums and counts of the TTFT and inter-token latency histograms."""

    ttft_sum: float | None
    ttft_count: float | None
    itl_sum: float | None
    itl_count: float | None


@dataclass(frozen=True)
class ServerWindow:
    """What the server measured over one level: means, not medians (histogram sums)."""

    ttft_s: float | None  # mean time to first token, as the engine timed it
    stream_decode_tps: float | None  # 1 / mean inter-token latency: one stream's speed
    requests: int


def totals_from(families: Families, mapping: MetricsMap) -> HistogramTotals:
    def pick(bases: tuple[str, ...], suffix: str) -> float | None:
        return total(families, tuple(base + suffix for base in bases))

    return HistogramTotals(
        pick(mapping.ttft_histogram, "_sum"),
        pick(mapping.ttft_histogram, "_count"),
        pick(mapping.itl_histogram, "_sum"),
        pick(mapping.itl_histogram, "_count"),
    )


def window(before: HistogramTotals | None, after: HistogramTotals | None) -> ServerWindow | None:
    """The level's means from two readings; None when either is missing, nothing was
    counted, or a counter went down (the engine restarted mid-level)."""
    if before is None or after is None:
        return None

    def mean(
        sum0: float | None, sum1: float | None, n0: float | None, n1: float | None
    ) -> tuple[float | None, float]:
        if None in (sum0, sum1, n0, n1):
            return None, 0.0
        count, seconds = n1 - n0, sum1 - sum0  # type: ignore[operator]
        if count <= 0 or seconds < 0:
            return None, max(count, 0.0)
        return seconds / count, count

    ttft, requests = mean(before.ttft_sum, after.ttft_sum, before.ttft_count, after.ttft_count)
    itl, _ = mean(before.itl_sum, after.itl_sum, before.itl_count, after.itl_count)
    if ttft is None and itl is None:
        return None
    return ServerWindow(ttft, 1.0 / itl if itl else None, int(requests))


def read_totals(http: httpx.Client, url: str, mapping: MetricsMap) -> HistogramTotals | None:
    """One scrape of `url`; None when it cannot be read (the comparison is then skipped and
    the report simply has no server column for that level)."""
    try:
        response = http.get(url, timeout=SCRAPE_TIMEOUT_S)
        if response.status_code != 200:
            return None
        return totals_from(parse_body(response.content), mapping)
    except (httpx.HTTPError, MalformedMetrics):
        return None


def burst_reason(
    concurrency: int, requests: Sequence[RequestFigures], server_stream_tps: float | None
) -> str | None:
    """Why a level's client decode figures cannot be trusted, or None when they can: replies
    that reached the client in less time than the server's own mean inter-token latency says
    their tokens took to generate (the same allowance as for llama.cpp's per-reply timings)."""
    if not server_stream_tps:
        return None
    ok = [r for r in requests if r.ok]
    squeezed = []
    for r in ok:
        if r.output_tokens and r.output_tokens > 1 and r.first_at is not None:
            server_s = (r.output_tokens - 1) / server_stream_tps
            # the client's decode rate already allows for tokens read off the socket
            # together with the first (they share its stamp); none at all: one burst
            client_s = (r.output_tokens - 1) / r.decode_tps if r.decode_tps else 0.0
            if server_s - client_s > max(BEHIND_SHARE * server_s, BEHIND_MIN_S):
                squeezed.append(r)
    if not squeezed:
        return None
    rates = [r.decode_tps for r in squeezed if r.decode_tps is not None]
    seen = f"up to {max(rates):,.0f} tok/s" if rates else "all at once"
    return (
        f"at concurrency {concurrency}, {len(squeezed)} of {len(ok)} replies reached the "
        f"client faster than the server generated them ({seen} by the client's clock, "
        f"{server_stream_tps:,.0f} tok/s per stream by the server's inter-token latency "
        "histogram): delivered in bursts, their decode rates measure delivery, not decoding"
    )
