"""The metrics tab: the engine-metrics panel and the worker that samples the engine.

The app binds what the chat tab talks to into `target` (sparkdeck's ready engine, else the
one attached engine that answers: the choice `sparkdeck metrics` makes without --endpoint).
A new engine restarts the sampler, none stops it and empties the trail; an engine without a
metrics endpoint is read as such, so the panel says so instead of waiting for a reading that
never comes. The trail reaches the panel only while the tab is shown (`shown`, set by the
app when tabs change), so a hidden panel costs nothing each second. The metrics modules
(httpx, prometheus_client) load with the first ready engine, not with the UI.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from textual.app import ComposeResult
from textual.message import Message
from textual.reactive import var
from textual.worker import Worker, WorkType

from sparkdeck.ui.messages import report_worker_failure
from sparkdeck.ui.metrics.panel import EngineMetricsPanel, Trail
from sparkdeck.ui.readers import ChatTarget
from sparkdeck.ui.screen_layout import BlankColumn

if TYPE_CHECKING:
    from sparkdeck.metrics.reader import MetricsReader
    from sparkdeck.metrics.sampler import MetricsSampler
    from sparkdeck.presets import Preset
    from sparkdeck.ui.metrics.fed_metrics import FedMetrics
    from sparkdeck.ui.service_feed import ServiceFeed


async def sample_forever(
    sampler: FedMetrics | MetricsSampler, post: Callable[[Message], object]
) -> None:
    """The body of the async metrics worker: a reading every second (the service's, or
    scraped here: ui.metrics.fed_metrics), the trail posted after each."""
    await sampler.run(lambda _metrics: post(MetricsTab.TrailSampled(sampler.trail)))


class MetricsTab(BlankColumn):
    """Samples `target`'s metrics and shows them (see the module docstring)."""

    @dataclass
    class TrailSampled(Message, bubble=False):
        """A new engine-metrics reading; carries the whole recent trail, newest last."""

        trail: Trail

        def can_replace(self, message: Message) -> bool:
            # The trail holds every earlier reading: a newer one loses nothing by replacing.
            return isinstance(message, MetricsTab.TrailSampled)

    target: var[ChatTarget] = var(ChatTarget(None))
    trail: var[Trail] = var((), always_update=True)  # what the panel shows
    shown: var[bool] = var(False)

    def __init__(
        self,
        preset: Callable[[str], Preset | None] = lambda _id: None,
        feed: ServiceFeed | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self._preset = preset  # the catalog's preset of a managed engine, for its plan
        self._feed = feed  # the service's readings of its engine, drawn instead of ours
        self._reader: MetricsReader | None = None
        self._sampled: str | None = None  # the engine sampled: container id or URL
        self.latest: Trail = ()  # the newest trail, shown or not
        self.also_show: Callable[[Trail], None] | None = None  # the at-a-glance strip

    def compose(self) -> ComposeResult:
        yield EngineMetricsPanel(id="engine-metrics").data_bind(trail=MetricsTab.trail)

    def watch_target(self, target: ChatTarget) -> None:
        """Sample the new engine once a second, or stop sampling (none). The instance (a
        container id) tells a relaunched engine at the same URL from the old one."""
        endpoint = target.endpoint
        key = (target.instance or endpoint.url) if endpoint is not None else None
        if key == self._sampled:
            return
        self._sampled = key
        self.workers.cancel_group(self, "metrics")
        self.latest = self.trail = ()
        if self.also_show is not None:
            self.also_show(())
        if endpoint is None:
            return
        from sparkdeck.engines import get_kind
        from sparkdeck.metrics.reader import MetricsReader
        from sparkdeck.metrics.sampler import MetricsSampler
        from sparkdeck.ui.metrics.fed_metrics import FedMetrics

        if self._reader is None:
            self._reader = MetricsReader()  # one shared HTTP client for the tab's life
        preset = self._preset(endpoint.preset_id) if endpoint.preset_id else None
        plan = get_kind(endpoint.kind).metrics_plan(endpoint.url, endpoint.metrics_path, preset)
        sampler = FedMetrics(MetricsSampler(plan, self._reader), self._feed, target.instance)

        # a coroutine function, not a coroutine: a worker that the next target replaces
        # before it starts never awaits a coroutine made for it (a RuntimeWarning)
        async def sample() -> None:
            await sample_forever(sampler, self.post_message)

        work: WorkType[None] = sample  # (mypy cannot choose WorkType's case by itself)
        self.run_worker(
            work,
            name="engine metrics",
            group="metrics",
            exclusive=True,
            exit_on_error=False,
            description=f"read {endpoint.name}'s metrics",
        )

    def on_metrics_tab_trail_sampled(self, message: TrailSampled) -> None:
        if self._sampled is None:  # a reading that raced a stop is dropped
            return
        self.latest = message.trail
        if self.also_show is not None:  # the strip is always on screen
            self.also_show(message.trail)
        if self.shown:  # a hidden panel is not redrawn every second
            self.trail = message.trail

    def watch_shown(self, shown: bool) -> None:
        if shown and self.trail is not self.latest:
            self.trail = self.latest  # opened: up to the newest trail at once

    def on_worker_state_changed(self, event: Worker.StateChanged) -> None:
        report_worker_failure(self.app, event)  # StateChanged does not bubble

    async def on_unmount(self) -> None:
        self.workers.cancel_group(self, "metrics")
        if self._reader is not None:
            await self._reader.aclose()
