"""The engine-metrics tab's glue: one sampling worker while an engine is ready, the trail as
app state bound into EngineMetricsPanel.

A mixin of SparkdeckApp (like LaunchControls), kept apart so app.py stays wiring. The app
calls `follow_metrics(engine)` with the ready engine (or None) after every engine reading;
a new container restarts the sampler, no ready engine stops it and empties the trail. The
trail reaches the panel only while its tab is shown (`show_metrics`), so a hidden panel costs
nothing each second. The metrics modules (httpx, prometheus_client) load with the first
ready engine, not with the UI.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from textual.reactive import reactive

from sparkdeck.presets import PresetCatalog
from sparkdeck.ui.engine_metrics_panel import MetricsSampled, Trail

if TYPE_CHECKING:
    from textual.app import App

    from sparkdeck.engine_state import EngineState
    from sparkdeck.metrics.reader import MetricsReader

    _Base = App[int]
else:
    _Base = object


class MetricsWiring(_Base):
    """The metrics half of SparkdeckApp (see the module docstring)."""

    metrics_trail: reactive[Trail] = reactive((), always_update=True)

    if TYPE_CHECKING:  # provided by SparkdeckApp
        _catalog: PresetCatalog

    _metrics_reader: MetricsReader | None = None
    _metrics_container: str | None = None
    _metrics_shown = False  # the metrics tab is the one on screen
    _latest_trail: Trail = ()

    def follow_metrics(self, engine: EngineState | None) -> None:
        """Sample `engine`'s metrics once a second (a ready engine), or stop sampling."""
        container = engine.container_id if engine is not None else None
        if container == self._metrics_container:
            return
        self._metrics_container = container
        self.workers.cancel_group(self, "metrics")
        if engine is None:
            self._latest_trail = self.metrics_trail = ()
            return
        from sparkdeck.metrics.reader import MetricsReader
        from sparkdeck.metrics.sampler import MetricsSampler, plan_for
        from sparkdeck.ui.engine_metrics_panel import sample_forever

        if self._metrics_reader is None:
            self._metrics_reader = MetricsReader()  # one shared HTTP client for the app
        plan = plan_for(engine.base_url, engine.kind, engine.metrics_path,
                        self._catalog.presets.get(engine.preset_id))
        self._latest_trail = self.metrics_trail = ()
        self.run_worker(sample_forever(MetricsSampler(plan, self._metrics_reader),
                                       self.post_message),
                        name="engine metrics", group="metrics", exclusive=True,
                        exit_on_error=False, description=f"read {engine.name}'s metrics")

    def on_metrics_sampled(self, message: MetricsSampled) -> None:
        if self._metrics_container is None:  # a reading that raced a stop is dropped
            return
        self._latest_trail = message.trail
        if self._metrics_shown:  # a hidden panel is not redrawn every second
            self.metrics_trail = message.trail

    def show_metrics(self, shown: bool) -> None:
        """The metrics tab was opened (or left): bring its panel up to the newest trail."""
        self._metrics_shown = shown
        if shown and self.metrics_trail is not self._latest_trail:
            self.metrics_trail = self._latest_trail

    async def close_metrics(self) -> None:
        """End sampling and close the shared HTTP client (the app's unmount)."""
        self.workers.cancel_group(self, "metrics")
        if self._metrics_reader is not None:
            await self._metrics_reader.aclose()
