"""The engine's own numbers in the service: sampled once a second while an engine is ready.

The service's own async task, on the API's loop (the metrics reader is async): it follows the
engine the guard follows, samples it with the same MetricsSampler the TUI's metrics tab and
`sparkdeck metrics` use, and publishes a `metrics` event per reading (the whole
EngineMetrics as `reading`, with the engine's name and container id: a window connected to
the service draws these instead of sampling the engine itself); `latest` holds the newest
for the flight recorder (tok/s beside the memory figures).
"""

from __future__ import annotations

import asyncio
import time
from typing import TYPE_CHECKING, Any

from sparkdeck.host.ticks import until_next_tick
from sparkdeck.service.hub import EventHub

if TYPE_CHECKING:
    from sparkdeck.metrics.reader import MetricsReader
    from sparkdeck.metrics.sampler import MetricsSampler
    from sparkdeck.metrics.snapshot import EngineMetrics
    from sparkdeck.service.guarding import GuardFollower

PERIOD_S = 1.0


class EngineMetricsLoop:
    def __init__(self, hub: EventHub, follower: GuardFollower) -> None:
        self.hub = hub
        self.follower = follower
        self.latest: EngineMetrics | None = None

    async def run(self) -> None:
        # the reader (and httpx under it) is made with the first ready engine: a service
        # with no engine never loads the HTTP client (docs/service.md, its RSS)
        reader: MetricsReader | None = None
        sampled: str | None = None
        sampler: MetricsSampler | None = None
        # the follower publishes an `engine` event whenever its engine or its readiness
        # changes: with no ready engine the loop sleeps until one, instead of waking to look
        changed = self.hub.wakes("engine")
        try:
            while True:
                changed.clear()
                began = time.monotonic()
                engine = self.follower.engine if self.follower.ready else None
                key = engine.container_id if engine is not None else None
                if key != sampled:
                    sampled, self.latest = key, None
                    if engine is not None and reader is None:
                        from sparkdeck.metrics.reader import MetricsReader

                        reader = MetricsReader()
                    sampler = self._sampler(engine, reader) if engine is not None else None
                if sampler is not None and engine is not None:
                    metrics = await sampler.sample(
                        timeout=0.85 * PERIOD_S, late_after=0.25 * PERIOD_S
                    )
                    if self.follower.engine is engine:  # not a reading of a stopped engine
                        self.latest = metrics
                        # the whole reading: a window draws it instead of sampling the
                        # engine a second time (sparkdeck.ui.service_feed)
                        self.hub.publish(
                            "metrics",
                            engine=engine.name,
                            container_id=engine.container_id,
                            reading=metrics.to_dict(),
                        )
                if sampler is not None:  # on the shared ticks, with telemetry (host.ticks)
                    await asyncio.sleep(until_next_tick(PERIOD_S, began))
                else:
                    await changed.wait()
        finally:
            if reader is not None:
                await reader.aclose()

    @staticmethod
    def _sampler(engine: Any, reader: Any) -> MetricsSampler:
        from sparkdeck.catalog import load_catalog
        from sparkdeck.engines import get_kind
        from sparkdeck.metrics.sampler import MetricsSampler

        preset = load_catalog().presets.get(engine.preset_id)
        plan = get_kind(engine.kind).metrics_plan(engine.base_url, engine.metrics_path, preset)
        return MetricsSampler(plan, reader)
