"""The once-a-second sampling loop as a plain class: scrape, keep history, normalise.

`plan_for` decides, from an engine's URL, kind, metrics path and (when sparkdeck launched
it) its preset, what to read and how to read it. `MetricsSampler.sample()` is one turn of
the loop; `MetricsSampler.run()` is the loop itself, used by `sparkdeck metrics` and by the
TUI's worker alike. Nothing here imports Textual.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from sparkdeck.engines import get_kind
from sparkdeck.metrics.history import MetricsHistory
from sparkdeck.metrics.mapping import MetricsMap
from sparkdeck.metrics.reader import MetricsReader, MetricsTarget, RawSample
from sparkdeck.metrics.snapshot import NO_MAP, EngineMetrics, normalise, unavailable
from sparkdeck.presets import Preset

SAMPLE_PERIOD_S = 1.0
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


def plan_for(base_url: str, kind: str, metrics_path: str | None,
             preset: Preset | None = None) -> MetricsPlan:
    """The plan for an engine at base_url; a preset adds its own map and bytes per token."""
    engine = get_kind(kind)
    mapping = engine.metrics_map_for(preset.options if preset else None)
    target = engine.metrics_target(base_url, metrics_path)
    bytes_per_token = preset.bytes_per_token if preset else None
    if target is None or mapping is None:
        what = "no metrics endpoint" if target is None else "no metric names"
        return MetricsPlan(engine.name, None, mapping, bytes_per_token,
                           f"{engine.title} has {what} sparkdeck knows: {engine.metrics_hint}")
    return MetricsPlan(engine.name, target, mapping, bytes_per_token)


class MetricsSampler:
    """Samples one engine: each call to sample() scrapes once and returns the numbers."""

    def __init__(self, plan: MetricsPlan, reader: MetricsReader,
                 trail_length: int = TRAIL_LENGTH) -> None:
        self.plan = plan
        self.reader = reader
        self.history = MetricsHistory()
        self._trail: deque[EngineMetrics] = deque(maxlen=trail_length)

    @property
    def trail(self) -> tuple[EngineMetrics, ...]:
        """The recent readings, oldest first: what the panel's sparklines draw."""
        return tuple(self._trail)

    async def sample(self) -> EngineMetrics:
        plan = self.plan
        if plan.target is None or plan.metrics_map is None:
            metrics = EngineMetrics(plan.kind, NO_MAP, time.time(), reason=plan.why_none)
        else:
            result = await self.reader.scrape(plan.target)
            if isinstance(result, RawSample):
                self.history.add(result)
                metrics = normalise(self.history, plan.metrics_map, plan.kind,
                                    plan.bytes_per_token)
            else:
                metrics = unavailable(plan.kind, result)
        self._trail.append(metrics)
        return metrics

    async def run(self, on_metrics: Callable[[EngineMetrics], Awaitable[None] | None],
                  samples: int | None = None, period_s: float = SAMPLE_PERIOD_S) -> None:
        """Sample on a fixed cadence of period_s, `samples` times or until cancelled.

        A slow scrape does not push the cadence back, and the ticks it overran are skipped
        rather than caught up in a burst (a burst would make rates over tiny intervals)."""
        start = time.monotonic()
        taken = 0
        while samples is None or taken < samples:
            result = on_metrics(await self.sample())
            if asyncio.iscoroutine(result):
                await result
            taken += 1
            if samples is not None and taken >= samples:
                break
            ticks = math.floor((time.monotonic() - start) / period_s) + 1
            await asyncio.sleep(max(0.0, start + ticks * period_s - time.monotonic()))
