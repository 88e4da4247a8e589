"""Which of an engine's metric names mean what: one `MetricsMap` per engine kind.

Each field lists alternative sample names, newest spelling first; the first one present in a
scrape wins, so one map reads old and new engine versions (vLLM renamed
`gpu_cache_usage_perc` to `kv_cache_usage_perc` and `time_per_output_token_seconds` to
`inter_token_latency_seconds`). Every series of the chosen name is summed over its label
sets (vLLM labels by model and engine index, SGLang by tp rank). The maps themselves live in
the engine modules; this module only says what a map is.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any

Names = tuple[str, ...]


@dataclass(frozen=True)
class MetricsMap:
    """The sample names an engine uses for each normalised number (empty: not reported)."""

    # Counters of tokens: the rate comes from their deltas.
    generation_tokens: Names = ()
    prompt_tokens: Names = ()
    # A live tok/s gauge, preferred over the counter when present: SGLang's token counters
    # only move when a request ends, so a counter rate would jump in bursts.
    generation_rate_gauge: Names = ()
    # Seconds the engine spent generating (llama.cpp): tokens over these seconds is the
    # decode speed of one stream.
    generation_seconds: Names = ()
    running: Names = ()
    waiting: Names = ()
    # KV-cache use as a fraction 0-1.
    kv_usage: Names = ()
    # Prefix cache: hits over queries from counter deltas, queries = hits + misses when an
    # engine counts misses instead; or a hit-rate gauge.
    prefix_hits: Names = ()
    prefix_queries: Names = ()
    prefix_misses: Names = ()
    prefix_hit_rate_gauge: Names = ()
    # Histograms (base names, without _bucket/_sum/_count).
    ttft_histogram: Names = ()
    itl_histogram: Names = ()
    # Speculative decoding: accepted over drafted tokens, or an acceptance-rate gauge.
    spec_accepted: Names = ()
    spec_drafted: Names = ()
    spec_accept_rate_gauge: Names = ()
    # Memory the engine reports holding, in bytes (Ollama's /api/ps size).
    memory_bytes: Names = ()
    gpu_memory_bytes: Names = ()
    # True when token counters only move as requests end (llama.cpp): the panel then
    # leans on the one-minute average rather than the jumpy per-second figure.
    counters_move_at_request_end: bool = False
    # A line the panel shows under the numbers (e.g. what this engine cannot report).
    note: str = ""

    def all_names(self) -> set[str]:
        """Every sample name this map reads (histograms as their _bucket names)."""
        found: set[str] = set()
        for f in fields(self):
            value = getattr(self, f.name)
            if isinstance(value, tuple) and f.name in USER_FIELDS:
                if f.name.endswith("_histogram"):
                    found.update(n + "_bucket" for n in value)
                else:
                    found.update(value)
        return found


# The fields a user may set in a custom engine's `[openai] metrics_map` table.
USER_FIELDS: tuple[str, ...] = tuple(f.name for f in fields(MetricsMap) if f.type == "Names")


def map_from_table(table: Mapping[str, str]) -> MetricsMap:
    """A map from a preset's `{field = "sample_name"}` table (keys checked beforehand)."""
    names: dict[str, Any] = {key: (name,) for key, name in table.items() if name}
    return MetricsMap(**names)


def table_problems(table: Mapping[str, str]) -> list[str]:
    """Why a user's metrics_map table is not usable; empty when it is."""
    problems = []
    for key, name in table.items():
        if key not in USER_FIELDS:
            problems.append(
                f"{key!r} is not a metric sparkdeck reads (known: {', '.join(USER_FIELDS)})"
            )
        elif not name.strip() or any(c.isspace() for c in name):
            problems.append(f"{key} = {name!r} is not a metric name")
    return problems
