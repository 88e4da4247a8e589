"""The once-a-second sampling loop as a plain class: scrape, keep history, normalise.

The engine kind decides, from an engine's URL, metrics path and (when sparkdeck launched
it) its preset, what to read and how to read it (EngineKind.metrics_plan, a MetricsPlan).
`MetricsSampler.sample()` is one turn of the loop; `MetricsSampler.run()` is the loop
itself, used by `sparkdeck metrics` and by the TUI's worker alike. Nothing here imports Textual.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, replace

from sparkdeck.metrics.history import MetricsHistory
from sparkdeck.metrics.mapping import MetricsMap
from sparkdeck.metrics.reader import MetricsReader, MetricsTarget, RawSample, Unreachable
from sparkdeck.metrics.snapshot import NO_MAP, EngineMetrics, normalise, unavailable

SAMPLE_PERIOD_S = 1.0
# A scrape may take this share of the period before it is given up (and the reading says
# so), but never less than MIN_SCRAPE_TIMEOUT_S: a big /metrics page on a busy host takes a
# few hundred ms, and a short --interval must not turn that into "unreachable".
SCRAPE_SHARE = 0.85
MIN_SCRAPE_TIMEOUT_S = 0.5
# A reading whose answer took longer than this share of the period is marked late.
LATE_SHARE = 0.25
MIN_LATE_S = 0.1
TRAIL_LENGTH = 120  # two minutes of sparkline at one sample a second


@dataclass(frozen=True)
class MetricsPlan:
    """What to read for one engine; `target` None means there is nothing to read and
    `why_none` says why."""

    kind: str
    target: MetricsTarget | None
    metrics_map: MetricsMap | None
    bytes_per_token: float | None = None
    why_none: str | None = None


class MetricsSampler:
    """Samples one engine: each call to sample() scrapes once and returns the numbers."""

    def __init__(
        self, plan: MetricsPlan, reader: MetricsReader, trail_length: int = TRAIL_LENGTH
    ) -> None:
        self.plan = plan
        self.reader = reader
        self.history = MetricsHistory()
        self._trail: deque[EngineMetrics] = deque(maxlen=trail_length)

    @property
    def trail(self) -> tuple[EngineMetrics, ...]:
        """The recent readings, oldest first: what the panel's sparklines draw."""
        return tuple(self._trail)

    async def sample(
        self, timeout: float | None = None, late_after: float | None = None
    ) -> EngineMetrics:
        """Scrape once. A scrape that has no answer after `timeout` s is given up (the
        reading says so); one slower than `late_after` s is marked late."""
        plan = self.plan
        if plan.target is None or plan.metrics_map is None:
            metrics = EngineMetrics(plan.kind, NO_MAP, time.time(), reason=plan.why_none)
        else:
            began = time.monotonic()
            try:
                result = await asyncio.wait_for(self.reader.scrape(plan.target), timeout)
            except TimeoutError:
                result = Unreachable(
                    f"no answer within {timeout:.2g} s (the engine is busy "
                    "or hung); the next reading tries again",
                    time.time(),
                    time.monotonic(),
                )
            took = time.monotonic() - began
            if isinstance(result, RawSample):
                self.history.add(result)
                metrics = normalise(self.history, plan.metrics_map, plan.kind, plan.bytes_per_token)
            else:
                metrics = unavailable(plan.kind, result)
            gave_up = timeout is not None and took >= timeout
            late = gave_up or (late_after is not None and took > late_after)
            metrics = replace(metrics, late=late, scrape_s=None if gave_up else took)
        self._trail.append(metrics)
        return metrics

    async def run(
        self,
        on_metrics: Callable[[EngineMetrics], object],
        samples: int | None = None,
        period_s: float = SAMPLE_PERIOD_S,
    ) -> None:
        """Sample on a fixed cadence of period_s, `samples` times or until cancelled.

        A scrape is given up when it has no answer by most of the period (vLLM's /metrics
        hangs for seconds under load), so one reading comes per tick whatever the engine
        does; rates come from each answer's own time, so a slow one does not bend them. A
        tick overrun anyway (a short period) is skipped rather than caught up in a burst."""
        start = time.monotonic()
        timeout = max(period_s * SCRAPE_SHARE, MIN_SCRAPE_TIMEOUT_S)
        late_after = max(period_s * LATE_SHARE, MIN_LATE_S)
        taken = 0
        while samples is None or taken < samples:
            result = on_metrics(await self.sample(timeout, late_after))
            if asyncio.iscoroutine(result):
                await result
            taken += 1
            if samples is not None and taken >= samples:
                break
            ticks = math.floor((time.monotonic() - start) / period_s) + 1
            await asyncio.sleep(max(0.0, start + ticks * period_s - time.monotonic()))
