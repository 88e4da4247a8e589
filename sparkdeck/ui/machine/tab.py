"""The machine tab: unified memory and PSI, the GPU and the environment, and the telemetry
worker that feeds them.

The loop itself is TelemetrySampler.run (a plain class, also what `sparkdeck telemetry`
samples with), or FedTelemetry.run (the service's samples while it answers:
sparkdeck.ui.service_feed); this widget runs it in a thread worker at 1 Hz, or 2 Hz while
an engine starts (`fast`, bound from the app), and hands each sample to its panels. The
environment report is bound from the app too. The panels are drawn whether the tab is shown
or not: the watchdog's numbers and the first frame's memory figure must never wait for a
tab switch.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import partial
from typing import Any

from textual.app import ComposeResult
from textual.message import Message
from textual.reactive import var
from textual.worker import Worker, get_current_worker

from sparkdeck.config.settings import GuardSettings
from sparkdeck.telemetry.sampler import History, Series, TelemetrySampler, TelemetrySnapshot
from sparkdeck.ui.machine.environment import EnvironmentPanel, EnvironmentReport
from sparkdeck.ui.machine.panels import GpuPanel, MemoryPanel
from sparkdeck.ui.messages import report_worker_failure
from sparkdeck.ui.screen_layout import BlankColumn
from sparkdeck.ui.service_feed import FedTelemetry

SAMPLE_SECONDS = 1.0  # telemetry once a second ...
STARTING_SAMPLE_SECONDS = 0.5  # ... twice while an engine starts, the dangerous phase


class MachineTab(BlankColumn):
    """The machine tab's panels and their sampling worker (see the module docstring)."""

    # Messages a widget posts to itself do not bubble: each hop up to the app would cost a
    # dispatch every second (idle CPU, benchmarks/tui_idle.py).
    @dataclass
    class TelemetrySampled(Message, bubble=False):
        """The sampler read the machine; `history` holds each sparkline series up to now."""

        snapshot: TelemetrySnapshot
        history: Mapping[str, Series]

        def can_replace(self, message: Message) -> bool:
            # The history travels with every sample, so dropping an older unhandled one
            # loses nothing: a slow UI skips frames instead of falling behind the sampler.
            return isinstance(message, MachineTab.TelemetrySampled)

    fast: var[bool] = var(False)  # an engine is starting: sample twice a second
    environment: var[EnvironmentReport] = var(EnvironmentReport())

    def __init__(
        self,
        sampler: TelemetrySampler | FedTelemetry,
        history: History,
        guard: GuardSettings,
        periods: tuple[float, float] = (SAMPLE_SECONDS, STARTING_SAMPLE_SECONDS),
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self._sampler, self._history, self._guard, self._periods = (
            sampler,
            history,
            guard,
            periods,
        )
        # Who else draws each sample (the at-a-glance strip): one sampler for both.
        self.also_show: Callable[[TelemetrySnapshot, Mapping[str, Series]], None] | None = None

    def compose(self) -> ComposeResult:
        # Kept as attributes: a sample that lands while the app shuts down finds them still.
        self._memory = MemoryPanel(self._guard, id="memory-panel")
        self._gpu = GpuPanel(id="gpu-panel")
        yield self._memory
        yield self._gpu
        yield EnvironmentPanel(id="environment-panel").data_bind(report=MachineTab.environment)

    def start(self) -> None:
        """Begin sampling (the app calls this after its first frame: a reader's thread would
        otherwise compete with that frame for the interpreter)."""
        self.run_worker(
            partial(self._sample, self.fast),
            thread=True,
            exclusive=True,
            group="telemetry",
            name="sample telemetry",
            exit_on_error=False,
            description="read memory, PSI, NVML and power rails",
        )

    def watch_fast(self, fast: bool) -> None:
        if any(w.group == "telemetry" for w in self.workers):
            self.start()  # exclusive: the running loop ends, a new one starts now

    def _sample(self, fast: bool) -> None:
        worker = get_current_worker()
        period = self._periods[1 if fast else 0]
        # is_running too: a loop started while the app shuts down is never cancelled, and
        # an endless thread would keep the process from exiting.
        self._sampler.run(
            self._history,
            lambda: period,
            lambda snapshot, history: self.post_message(self.TelemetrySampled(snapshot, history)),
            worker.cancelled_event,
            lambda: self.app.is_running,
        )

    def on_machine_tab_telemetry_sampled(self, message: TelemetrySampled) -> None:
        self._memory.show(message.snapshot, message.history)
        self._gpu.show(message.snapshot, message.history)
        if self.also_show is not None:
            self.also_show(message.snapshot, message.history)

    def on_worker_state_changed(self, event: Worker.StateChanged) -> None:
        report_worker_failure(self.app, event)  # StateChanged does not bubble
