"""The memory guard's glue in the dashboard: the fit modal before a launch that does not fit,
the switch-wait screen while the old engine's memory comes back, the start-up timeline chart,
and the running watchdog for the engine sparkdeck started.

A mixin of SparkdeckApp (like LaunchControls), kept apart so app.py stays wiring. Launch
events from sparkdeck.launcher are turned into the guard's messages here (`launch_sink`);
the watchdog loop itself is sparkdeck.guard.watchdog.Watchdog, run in a thread worker.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import replace
from functools import partial
from typing import TYPE_CHECKING, Any

from sparkdeck.settings import Settings
from sparkdeck.ui.engine_card import EngineReport
from sparkdeck.ui.guard_messages import GuardDecisionMade, SwitchProgressed, TimelineRecorded
from sparkdeck.ui.guard_screens import FitModal, SwitchWaitScreen
from sparkdeck.ui.guard_widgets import TimelineChart, WatchdogLine
from sparkdeck.ui.messages import LaunchProgressed

if TYPE_CHECKING:
    from textual.app import App

    from sparkdeck.engine_state import EngineState
    from sparkdeck.launch_flow import LaunchPlan
    from sparkdeck.ui.readers import EngineReader

    _Base = App[int]
else:
    _Base = object


class GuardWiring(_Base):
    """The guard half of SparkdeckApp (see the module docstring)."""

    if TYPE_CHECKING:  # provided by SparkdeckApp and LaunchControls
        settings: Settings
        engine_report: EngineReport
        watchdog_line: WatchdogLine
        timeline_chart: TimelineChart
        _engine_reader: EngineReader

        def _busy(self) -> bool: ...

    _switch_screen: SwitchWaitScreen | None = None
    _skip_switch: threading.Event | None = None  # set by the wait screen's skip
    _watchdog_done: threading.Event | None = None
    _watched: str | None = None

    # ----- before a launch: the fit verdict -------------------------------------------------

    def confirm_fit(self, plan: LaunchPlan, confirm: Callable[[LaunchPlan, bool], None]) -> None:
        """Go on to `confirm(plan, force)` if the plan fits; else ask in a FitModal first,
        where "Launch anyway" means force and Cancel (the default) launches nothing."""
        fit = plan.fit
        if fit is None or fit.allowed:
            confirm(plan, False)
            return
        self.push_screen(FitModal(plan.preset.id, fit),
                         lambda anyway: confirm(plan, True) if anyway else None)

    # ----- during a launch: events to messages ----------------------------------------------

    def launch_sink(self) -> Callable[[Any], None]:
        """What the launch worker calls with each launcher event (from its thread)."""
        from sparkdeck.launcher import GuardDecided, SwitchWaited, TimelineSaved

        def on_event(event: Any) -> None:
            if isinstance(event, SwitchWaited):
                self.post_message(SwitchProgressed(event.progress, event.engine))
            elif isinstance(event, GuardDecided):
                self.post_message(GuardDecisionMade(event.decision))
            elif isinstance(event, TimelineSaved):
                self.post_message(TimelineRecorded(event.timeline))
            self.post_message(LaunchProgressed(event))

        return on_event

    async def on_switch_progressed(self, message: SwitchProgressed) -> None:
        progress, screen = message.progress, self._switch_screen
        if screen is None:
            if progress.done:  # memory was back at the first look: nothing to wait for
                return
            skip = self._skip_switch or threading.Event()
            screen = self._switch_screen = SwitchWaitScreen(message.engine_name, skip)
            await self.push_screen(screen)
        screen.show(progress)  # closes itself when the wait is over
        if progress.done:
            self._switch_screen = None

    def close_switch_screen(self) -> None:
        """The launch ended (a failure included): no wait screen may outlive it."""
        screen, self._switch_screen = self._switch_screen, None
        if screen is not None and screen.is_attached and screen in self.screen_stack:
            screen.dismiss(None)

    def on_timeline_recorded(self, message: TimelineRecorded) -> None:
        self.timeline_chart.timeline = message.timeline

    # ----- while an engine runs: the watchdog -----------------------------------------------

    def follow_watchdog(self, engine: EngineState | None) -> None:
        """Guard `engine` (a ready sparkdeck engine) at guard.running_hz, or stop guarding.

        A launch has a start-up watchdog of its own, so the app passes None while one runs."""
        container = engine.container_id if engine is not None else None
        line = self.watchdog_line
        if engine is None:
            line.off("not running (no engine is ready)" if not self._busy() else
                     "paused while a launch or stop runs (a launch guards its own start-up)")
        if container == self._watched:
            return
        self._watched = container
        if self._watchdog_done is not None:
            self._watchdog_done.set()  # the old loop ends at its next wait
            self._watchdog_done = None
        if engine is None:
            return
        from sparkdeck.guard.policy import WatchdogPolicy
        from sparkdeck.guard.readings import HostReadings
        from sparkdeck.guard.watchdog import Watchdog

        runtime = self._engine_reader.runtime()
        watchdog = Watchdog(WatchdogPolicy(self.settings.guard), HostReadings(),
                            lambda: runtime.stop(engine.container_id, grace=0),
                            engine=engine.name,
                            on_decision=lambda d: self.post_message(GuardDecisionMade(d)))
        done = self._watchdog_done = threading.Event()
        line.off(f"watching {engine.preset_id or engine.name}…")
        self.run_worker(partial(watchdog.run, done, lambda: self.settings.guard.running_hz),
                        thread=True, name="memory watchdog", group="guard", exclusive=True,
                        exit_on_error=False, description=f"guard {engine.name}'s memory")

    def on_guard_decision_made(self, message: GuardDecisionMade) -> None:
        decision = message.decision
        self.watchdog_line.show(decision)
        if decision.level != "stop":
            return
        text = "; ".join(decision.reasons)
        self.engine_report = replace(self.engine_report,
                                     guard_stop=f"stopped by the memory guard: {text}")
        if not self._busy():  # a stop during a launch is reported as the launch's failure
            self.notify(f"the memory guard stopped the engine: {text}",
                        title="memory guard", severity="error", markup=False)

    def stop_watchdog(self) -> None:
        if self._watchdog_done is not None:
            self._watchdog_done.set()
