"""Prometheus text bodies turned into a frozen, checked set of series.

Parsing is prometheus_client's own text parser; this module only decides what sparkdeck
will trust. A body an engine should never send (not UTF-8, too large, unparsable, a counter
below zero or not finite, the same series twice) is refused as a whole with the reason, so
one garbled scrape never shows up as a fake zero or a fake burst of tokens.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType

# A real vLLM body is ~30-60 kB; anything near this is not an engine's metrics page.
MAX_BODY_BYTES = 8 * 1024 * 1024
MAX_SERIES = 50_000

Labels = tuple[tuple[str, str], ...]


class MalformedMetrics(ValueError):
    """A metrics body sparkdeck refuses; str() is the reason, for the panel and the CLI."""


@dataclass(frozen=True)
class Series:
    """Every value of one sample name, one per label set."""

    values: tuple[tuple[Labels, float], ...]

    def total(self) -> float:
        return math.fsum(v for _, v in self.values)


Families = Mapping[str, Series]


def _reason(exc: Exception) -> str:
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    return text[:200]


# Sample names that are cumulative by convention, whatever the TYPE line says (a body may
# omit TYPE lines; the text parser then calls every family "unknown").
_CUMULATIVE_SUFFIXES = ("_total", "_count", "_bucket")


def _check_value(name: str, kind: str, labels: Labels, value: float) -> None:
    cumulative = not name.endswith("_sum") and (
        kind in ("counter", "histogram", "summary") or name.endswith(_CUMULATIVE_SUFFIXES)
    )
    if cumulative and not math.isfinite(value):
        raise MalformedMetrics(f"{name} is {value}: a counter must be a finite number")
    if cumulative and value < 0:
        raise MalformedMetrics(f"{name} is {value:g}: a counter never goes below 0")
    if name.endswith("_bucket") and (kind == "histogram" or "le" in dict(labels)):
        le = dict(labels).get("le")
        try:
            bound = float(le) if le is not None else math.nan
        except ValueError:
            bound = math.nan
        if math.isnan(bound) or bound == -math.inf:
            raise MalformedMetrics(f"{name} has le={le!r}, not a bucket bound")


def parse_body(body: bytes) -> Families:
    """Parse and check a /metrics body; raise MalformedMetrics with the reason if refused."""
    if len(body) > MAX_BODY_BYTES:
        raise MalformedMetrics(f"body is {len(body)} bytes, more than {MAX_BODY_BYTES}")
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise MalformedMetrics(f"body is not UTF-8 text (byte {exc.start})") from None
    if "\x00" in text:
        raise MalformedMetrics("body contains NUL bytes: not a metrics page")
    collected: dict[str, dict[Labels, float]] = {}
    count = 0
    # Imported on the first scrape: the preset loader reaches this module through the engine
    # kinds, and the TUI's first frame should not pay for the parser (benchmarks/tui_idle.py).
    from prometheus_client.parser import text_string_to_metric_families

    try:
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                labels: Labels = tuple(sorted(sample.labels.items()))
                value = float(sample.value)
                _check_value(sample.name, family.type, labels, value)
                per_name = collected.setdefault(sample.name, {})
                if labels in per_name:
                    raise MalformedMetrics(f"{sample.name}{dict(labels)} appears twice")
                per_name[labels] = value
                count += 1
                if count > MAX_SERIES:
                    raise MalformedMetrics(f"more than {MAX_SERIES} series")
    except MalformedMetrics:
        raise
    # The parser signals bad input with ValueError mostly, but hostile bodies also reach
    # IndexError/TypeError/KeyError inside it; all of them mean "not a metrics page".
    except Exception as exc:  # noqa: BLE001
        raise MalformedMetrics(f"not Prometheus text: {_reason(exc)}") from None
    return MappingProxyType(
        {name: Series(tuple(values.items())) for name, values in collected.items()}
    )


def total(families: Families, names: tuple[str, ...]) -> float | None:
    """The sum over label sets of the first of `names` present, or None if none is."""
    for name in names:
        series = families.get(name)
        if series is not None:
            value = series.total()
            return value if math.isfinite(value) else None
    return None


def buckets(families: Families, bases: tuple[str, ...]) -> dict[float, float] | None:
    """Cumulative bucket counts by upper bound, summed over label sets, for the first of
    `bases` (histogram base names) present."""
    for base in bases:
        series = families.get(base + "_bucket")
        if series is None:
            continue
        summed: dict[float, float] = {}
        for labels, value in series.values:
            le = dict(labels).get("le")
            if le is None:
                return None  # a gauge that happens to end in _bucket, not a histogram
            bound = float(le)  # checked by parse_body
            summed[bound] = summed.get(bound, 0.0) + value
        return summed
    return None
