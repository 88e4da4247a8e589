"""A minute of raw samples, and the deltas, rates and quantiles that need more than one.

Counters are cumulative, so every figure here comes from differences between samples.
Differences are taken step by step: when a counter drops (the engine restarted), that step
counts the new value from zero, as Prometheus' own rate() does, instead of going negative.
Histogram quantiles come from the bucket increments over the window, interpolated inside
the bucket the way Prometheus' histogram_quantile() does.
"""

from __future__ import annotations

import itertools
import math
from collections import deque
from collections.abc import Iterator

from sparkdeck.metrics.exposition import buckets, total
from sparkdeck.metrics.reader import RawSample

WINDOW_S = 60.0


def _step(old: float, new: float) -> tuple[float, bool]:
    """The increase from old to new, and whether the counter was reset in between."""
    return (new, True) if new < old else (new - old, False)


def quantile(q: float, increments: dict[float, float]) -> float | None:
    """The q-quantile of observations given cumulative counts per upper bound."""
    bounds = sorted(increments)
    if not bounds or bounds[-1] != math.inf:
        return None
    count = increments[math.inf]
    if count <= 0:
        return None
    rank = q * count
    previous_bound, previous_count = 0.0, 0.0
    for bound in bounds:
        cumulative = increments[bound]
        if cumulative >= rank:
            if bound == math.inf:
                return previous_bound  # beyond the last finite bucket: its bound is all we know
            inside = cumulative - previous_count
            if inside <= 0:
                return bound
            low = previous_bound if previous_bound < bound else bound
            return low + (bound - low) * (rank - previous_count) / inside
        previous_bound, previous_count = bound, cumulative
    return previous_bound


class MetricsHistory:
    """The raw samples of the last `window_s` seconds (plus one older one as a baseline)."""

    def __init__(self, window_s: float = WINDOW_S) -> None:
        self.window_s = window_s
        self._samples: deque[RawSample] = deque()

    def add(self, sample: RawSample) -> None:
        if self._samples and sample.monotonic <= self._samples[-1].monotonic:
            return  # out of order or duplicate: a rate over zero seconds means nothing
        self._samples.append(sample)
        # Keep the newest sample older than the window: it is the window's baseline.
        while (
            len(self._samples) > 2
            and (sample.monotonic - self._samples[1].monotonic) >= self.window_s
        ):
            self._samples.popleft()

    def clear(self) -> None:
        self._samples.clear()

    def __len__(self) -> int:
        return len(self._samples)

    @property
    def latest(self) -> RawSample | None:
        return self._samples[-1] if self._samples else None

    def _span(self, seconds: float | None) -> list[RawSample]:
        """The samples from the last one at least `seconds` old (or the oldest) to now."""
        samples = list(self._samples)
        if seconds is None or len(samples) < 2:
            return samples
        if seconds <= 0:
            return samples[-2:]
        now = samples[-1].monotonic
        start = 0
        for i, s in enumerate(samples):
            if now - s.monotonic >= seconds:
                start = i
        return samples[start:]

    def _pairs(self, seconds: float | None) -> Iterator[tuple[RawSample, RawSample]]:
        span = self._span(seconds)
        return itertools.pairwise(span)

    def increase(
        self, names: tuple[str, ...], seconds: float | None = None
    ) -> tuple[float, float, bool] | None:
        """(increase, elapsed seconds, reset seen) of a counter over the span; None when
        the counter is missing from any sample of the span or there is only one sample."""
        if not names:
            return None
        grown, elapsed, reset = 0.0, 0.0, False
        steps = 0
        for old, new in self._pairs(seconds):
            a, b = total(old.families, names), total(new.families, names)
            if a is None or b is None:
                return None
            step, was_reset = _step(a, b)
            grown += step
            reset |= was_reset
            elapsed += new.monotonic - old.monotonic
            steps += 1
        return (grown, elapsed, reset) if steps else None

    def rate(self, names: tuple[str, ...], seconds: float | None) -> float | None:
        """Per-second increase of a counter over the span (the last step when seconds=0)."""
        found = self.increase(names, seconds)
        if found is None or found[1] <= 0:
            return None
        return found[0] / found[1]

    def ratio(
        self, part: tuple[str, ...], whole: tuple[str, ...], seconds: float | None
    ) -> float | None:
        """increase(part) / increase(whole) over the span; None when whole did not move."""
        a, b = self.increase(part, seconds), self.increase(whole, seconds)
        if a is None or b is None or b[0] <= 0:
            return None
        return min(max(a[0] / b[0], 0.0), 1.0)

    def histogram_increments(
        self, bases: tuple[str, ...], seconds: float | None
    ) -> dict[float, float] | None:
        """Per-bound increases of a histogram's cumulative buckets over the span."""
        if not bases:
            return None
        summed: dict[float, float] = {}
        steps = 0
        for old, new in self._pairs(seconds):
            a, b = buckets(old.families, bases), buckets(new.families, bases)
            if a is None or b is None:
                return None
            # A reset in any bucket is a reset of the whole histogram.
            reset = any(b.get(bound, 0.0) < value for bound, value in a.items())
            for bound, value in b.items():
                step = value if reset else value - a.get(bound, 0.0)
                summed[bound] = summed.get(bound, 0.0) + max(step, 0.0)
            steps += 1
        return summed if steps else None

    def histogram_mean(self, bases: tuple[str, ...], seconds: float | None) -> float | None:
        """Mean observation over the span, from the _sum and _count increases."""
        for base in bases:
            count = self.increase((base + "_count",), seconds)
            sums = self.increase((base + "_sum",), seconds)
            if count is not None and sums is not None:
                return sums[0] / count[0] if count[0] > 0 else None
        return None
