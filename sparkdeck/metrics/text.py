"""Engine numbers as short words, shared by `sparkdeck metrics` and the TUI's engine panel.

A number the engine does not report reads "n/a", never 0.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:  # the TUI draws with these words before any engine is read
    from sparkdeck.metrics.snapshot import EngineMetrics

NA = "n/a"


def rate(value: float | None) -> str:
    if value is None:
        return NA
    return f"{value:,.0f}" if value >= 100 else f"{value:.1f}"


def count(value: float | None) -> str:
    return NA if value is None else f"{value:g}"


def percent(value: float | None) -> str:
    return NA if value is None else f"{value * 100:.0f}%"


def seconds(value: float | None) -> str:
    if value is None:
        return NA
    return f"{value * 1000:.0f} ms" if value < 1 else f"{value:.2f} s"


def fields(m: EngineMetrics) -> list[tuple[str, str]]:
    """(label, value) pairs of everything an ok reading carries, in display order."""
    pairs = [
        ("tok/s", rate(m.generation_tps)),
        ("1 min", rate(m.generation_tps_avg)),
        ("per stream", rate(m.stream_tps)),
        ("prompt tok/s", rate(m.prompt_tps)),
        ("running", count(m.running)),
        ("waiting", count(m.waiting)),
        ("KV", percent(m.kv_usage)),
        ("prefix hits", percent(m.prefix_hit_rate)),
        ("TTFT p50", seconds(m.ttft_p50_s)),
        ("TTFT p90", seconds(m.ttft_p90_s)),
    ]
    if m.spec_acceptance is not None:
        pairs.append(("spec accept", percent(m.spec_acceptance)))
    if m.memory_bytes is not None:
        pairs.append(("memory", f"{m.memory_bytes / 2**30:.1f} GiB"))
    if m.ceiling_tps is not None:
        pairs.append(("of ceiling", f"{percent(m.ceiling_share)} of {rate(m.ceiling_tps)}"))
    return pairs


def summary_line(m: EngineMetrics) -> str:
    """One line for a terminal: the numbers, or why there are none."""
    late = f"  [late: {late_words(m)}]" if m.late else ""
    if not m.ok:
        return f"{m.status}: {m.reason or 'no reason given'}{late}"
    line = "  ".join(f"{label} {value}" for label, value in fields(m))
    return line + ("  (counters reset: engine restarted)" if m.restarted else "") + late


def late_words(m: EngineMetrics) -> str:
    """Why a reading is marked late, e.g. `the engine took 2.31 s to answer`."""
    if m.scrape_s is None:
        return "no answer in time"
    return f"the engine took {m.scrape_s:.2f} s to answer"
