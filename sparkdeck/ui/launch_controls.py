"""Launch, switch and stop from the dashboard: keys, confirmations, workers, the card's steps.

A mixin of SparkdeckApp, kept apart so app.py stays wiring. Planning (what a launch stops,
what it claims, whether it fits) and running both go through sparkdeck.launch_flow.LaunchFlow
in thread workers; the user confirms each plan on a ConfirmScreen (after the guard's FitModal
when the plan does not fit); progress events update the engine card; a failed launch or
stop is reported by the app's one worker-failure handler.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from textual import work

from sparkdeck.launch_flow import LaunchFlow, LaunchPlan, StopPlan
from sparkdeck.presets import PresetCatalog
from sparkdeck.pull_progress import PullTracker
from sparkdeck.ui.engine_card import EngineReport, report_after
from sparkdeck.ui.messages import LaunchFinished, LaunchPlanned, LaunchProgressed
from sparkdeck.ui.screens.confirm import ConfirmScreen
from sparkdeck.ui.widgets import PresetTable

if TYPE_CHECKING:
    from textual.app import App

    _Base = App[int]
else:
    _Base = object


class LaunchControls(_Base):
    """The launch/stop half of SparkdeckApp (see the module docstring)."""

    if TYPE_CHECKING:  # provided by SparkdeckApp
        _flow: LaunchFlow
        _catalog: PresetCatalog
        _pull: PullTracker
        engine_report: EngineReport

        _skip_switch: threading.Event | None

        def _follow(self, container_id: str | None, name: str) -> None: ...
        def _set_fast_sampling(self, fast: bool) -> None: ...
        def read_engine(self) -> object: ...
        def launch_sink(self) -> Callable[[Any], None]: ...
        def confirm_fit(self, plan: LaunchPlan,
                        confirm: Callable[[LaunchPlan, bool], None]) -> None: ...
        def close_switch_screen(self) -> None: ...
        def follow_watchdog(self, engine: object) -> None: ...

    def action_launch(self) -> None:
        preset_id = self.query_one(PresetTable).selected_id()
        if preset_id is None or preset_id not in self._catalog.presets:
            self.notify("no preset selected", severity="warning")
        elif self._busy():
            self.notify("a launch or stop is already running", severity="warning")
        else:
            self.plan_launch(preset_id)

    def on_data_table_row_selected(self, event: PresetTable.RowSelected) -> None:
        self.action_launch()  # enter on a preset row

    def action_stop(self) -> None:
        if self._busy():
            self.notify("a launch or stop is already running", severity="warning")
        else:
            self.plan_stop()

    def _busy(self) -> bool:
        return any(w.group == "launch" and not w.is_finished for w in self.workers)

    @work(thread=True, group="launch", name="plan launch", exit_on_error=False,
          description="ask Docker what a launch would stop")
    def plan_launch(self, preset_id: str) -> None:
        self.post_message(LaunchPlanned(self._flow.plan(self._catalog.get(preset_id))))

    @work(thread=True, group="launch", name="plan stop", exit_on_error=False,
          description="ask Docker what a stop would stop")
    def plan_stop(self) -> None:
        self.post_message(LaunchPlanned(self._flow.plan_stop()))

    @work(thread=True, group="launch", name="launch", exit_on_error=False,
          description="pull, stop the running engine, flush, start, wait for health")
    def run_launch(self, plan: LaunchPlan, force: bool, skip: threading.Event) -> None:
        try:
            self._flow.run(plan, self.launch_sink(), force=force, skip_switch_wait=skip)
        finally:
            self.post_message(LaunchFinished("launch"))

    @work(thread=True, group="launch", name="stop", exit_on_error=False,
          description="stop the engine sparkdeck started")
    def run_stop(self) -> None:
        try:
            self._flow.stop(lambda event: self.post_message(LaunchProgressed(event)))
        finally:
            self.post_message(LaunchFinished("stop"))

    def on_launch_planned(self, message: LaunchPlanned) -> None:
        plan = message.plan
        if isinstance(plan, StopPlan):
            if not plan.stopping:
                self.notify(plan.lines()[0])
                return
            screen = ConfirmScreen("Stop the engine?", plan.lines(), "Stop")
            self.push_screen(screen, lambda yes: self._start_stop() if yes else None)
            return
        self.confirm_fit(plan, self._confirm_launch)  # a FitModal first if it does not fit

    def _confirm_launch(self, plan: LaunchPlan, force: bool) -> None:
        verb = "Switch" if plan.is_switch else "Launch"
        title = (f"Switch to {plan.preset.id}" if plan.is_switch
                 else f"Launch {plan.preset.id}") + (" anyway?" if force else "?")
        lines = plan.lines() + (["forced: the guard's verdict is overridden"] if force else [])
        self.push_screen(ConfirmScreen(title, lines, f"{verb} anyway" if force else verb),
                         lambda yes: self._start_launch(plan, force) if yes else None)

    def _start_launch(self, plan: LaunchPlan, force: bool = False) -> None:
        self._pull = PullTracker()
        self._skip_switch = threading.Event()
        self._set_fast_sampling(True)
        self.run_launch(plan, force, self._skip_switch)
        self.follow_watchdog(None)  # the launch guards its own start-up
        self.engine_report = replace(self.engine_report, guard_stop=None)

    def _start_stop(self) -> None:
        self.run_stop()
        self.follow_watchdog(None)  # its engine is going away on purpose

    def on_launch_progressed(self, message: LaunchProgressed) -> None:
        self.engine_report = report_after(self.engine_report, message.event, self._pull)
        engine = self.engine_report.reading.engine if self.engine_report.reading else None
        if engine is not None:
            self._follow(engine.container_id, engine.name)

    def on_launch_finished(self, message: LaunchFinished) -> None:
        self.close_switch_screen()
        self.engine_report = replace(self.engine_report, phase=None, detail="",
                                     pull_fraction=None)
        self.read_engine()
