"""The metrics tab's sampling loop: the service's readings of the engine while it sends them,
the window's own scrape of the engine's /metrics while it does not.

The sparkdeck service samples the engine its guard follows once a second and publishes each
whole reading (sparkdeck.service.engine_metrics); a window connected to it draws those
(sparkdeck.ui.service_feed) instead of scraping and parsing the same page again. An engine
the service does not sample (an attached one), a service that is off, silent, or has sent
nothing of this engine for a period and LATE_S: the window scrapes it itself, as before.

Nothing here imports Textual: the metrics tab runs `run` as its async worker.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Callable
from typing import TYPE_CHECKING

from sparkdeck.metrics.sampler import (
    LATE_SHARE,
    MIN_LATE_S,
    MIN_SCRAPE_TIMEOUT_S,
    SAMPLE_PERIOD_S,
    SCRAPE_SHARE,
    TRAIL_LENGTH,
    MetricsSampler,
)
from sparkdeck.ui.service_feed import LATE_S, ServiceFeed

if TYPE_CHECKING:
    from sparkdeck.metrics.snapshot import EngineMetrics


class FedMetrics:
    """Readings of one engine (`instance`: its container id, "" for an attached engine),
    from the service or scraped here; `trail` holds the recent ones, oldest first."""

    def __init__(
        self, sampler: MetricsSampler, feed: ServiceFeed | None, instance: str = ""
    ) -> None:
        self.sampler, self.feed, self.instance = sampler, feed, instance
        self._trail: deque[EngineMetrics] = deque(maxlen=TRAIL_LENGTH)
        self._seen = 0  # the feed's count of the last reading taken from it
        self.own_scrapes = 0

    @property
    def trail(self) -> tuple[EngineMetrics, ...]:
        return tuple(self._trail)

    async def run(
        self, on_metrics: Callable[[EngineMetrics], object], period_s: float = SAMPLE_PERIOD_S
    ) -> None:
        """Until cancelled: each of the service's readings as it comes, or a scrape of our
        own every `period_s` while the service sends none for this engine."""
        feed = self.feed if self.instance else None  # the service samples only its engine
        arrived = asyncio.Event()
        loop = asyncio.get_running_loop()
        unwatch = (
            feed.watch_metrics(lambda: loop.call_soon_threadsafe(arrived.set))
            if feed is not None
            else None
        )
        missed = False  # the service sent nothing of this engine in the last wait
        try:
            while True:
                got = feed.metrics_after(self._seen, self.instance) if feed is not None else None
                if got is not None:
                    (self._seen, metrics), missed = got, False
                else:
                    metrics = await self.sampler.sample(
                        max(period_s * SCRAPE_SHARE, MIN_SCRAPE_TIMEOUT_S),
                        max(period_s * LATE_SHARE, MIN_LATE_S),
                    )
                    self.own_scrapes += 1
                self._trail.append(metrics)
                on_metrics(metrics)
                arrived.clear()
                if feed is not None and feed.live and not missed:
                    # the service's next reading wakes us; none within the period and
                    # LATE_S, and we scrape the engine ourselves until one comes again
                    try:
                        await asyncio.wait_for(arrived.wait(), period_s + LATE_S)
                    except TimeoutError:
                        missed = True
                else:
                    await asyncio.sleep(period_s)
        finally:
            if unwatch is not None:
                unwatch()
