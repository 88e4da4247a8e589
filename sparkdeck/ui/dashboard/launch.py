"""The dashboard's left side: presets, the engine card and the log; launching, switching and
stopping from it.

Planning (what a launch stops, what it claims, whether it fits) goes through
sparkdeck.launch.plan.LaunchFlow in thread workers owned here; the confirmed plan goes to
sparkdeck.service.control.engine_control, which runs it in the sparkdeck service when one
runs (its guard goes on after this window closes) and in this window otherwise, and hands
back the same typed events either way: the card follows them step by step. The user
confirms each plan on a ConfirmScreen (after the guard's FitModal when the plan does not
fit); while an old engine's memory comes back a SwitchWaitScreen shows the wait (its skip
reaches a service's launch too); progress events update the engine card.
The app binds Docker's latest word into `docker`, the catalog into `catalog` and the table's
rows into `rows`; this widget tells the app when a launch or stop runs (`RunChanged`) and
hands a ready engine to the running watchdog through `hand_over`, from the launch thread,
so the engine is never unguarded between the launch's start-up watchdog and the app's.
"""

from __future__ import annotations

import contextlib
import functools
import threading
import time
from collections.abc import Callable
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from textual import work
from textual.app import ComposeResult
from textual.reactive import var
from textual.worker import Worker

from sparkdeck.catalog import PresetCatalog
from sparkdeck.config.settings import GuardSettings
from sparkdeck.launch.failure import (
    CARD_LOG_LINES,
    clear_failure,
    failure_log,
    failure_text,
    last_failure,
    with_engine_reason,
)
from sparkdeck.runtime.pull import PullTracker
from sparkdeck.ui.dashboard import launch_messages as messages
from sparkdeck.ui.dashboard.engine_card import (
    DockerFailure,
    EngineCard,
    EngineReport,
    failed_report,
    launch_report,
    stop_report,
)
from sparkdeck.ui.dashboard.log_pane import LogPane
from sparkdeck.ui.dashboard.presets import PresetTable
from sparkdeck.ui.messages import report_worker_failure
from sparkdeck.ui.readers import EngineReading, PresetRow
from sparkdeck.ui.screen_layout import BlankColumn

# The launch machinery (plan, events, the preset files' reader under them) loads with the
# first plan, in its worker: the dashboard's first frame does not wait for it.
if TYPE_CHECKING:
    from sparkdeck.launch.events import LaunchEvent
    from sparkdeck.launch.plan import LaunchFlow, LaunchPlan
    from sparkdeck.runtime.client import DockerRuntime
    from sparkdeck.runtime.state import EngineState
    from sparkdeck.ui.guard.screens import SwitchWaitScreen


class LaunchArea(BlankColumn):
    """Presets, engine card and log, and the launch and stop workers (see the module doc)."""

    # its messages (launch_messages.py), by the names its handlers and the app use
    Planned = messages.Planned
    Progressed = messages.Progressed
    ServiceStepped = messages.ServiceStepped
    Finished = messages.Finished
    SwitchProgressed = messages.SwitchProgressed
    TimelineRecorded = messages.TimelineRecorded
    RunChanged = messages.RunChanged

    docker: var[EngineReading | DockerFailure | None] = var(None, always_update=True)
    catalog: var[PresetCatalog] = var(PresetCatalog({}, []))
    rows: var[list[PresetRow]] = var(list)
    report: var[EngineReport] = var(EngineReport())
    failure: var[str | None] = var(None)  # last failed launch, until dismissed
    failure_log: var[tuple[str, ...]] = var(())  # ... and the engine's last lines, cleaned

    def __init__(
        self,
        runtime: Callable[[], DockerRuntime],
        flush: bool | None,
        guard: GuardSettings,
        hand_over: Callable[[EngineState], None],
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self._flow_made: LaunchFlow | None = None
        self._flow_args = (flush, guard)
        self._runtime = runtime
        self._hand_over = hand_over
        self._pull = PullTracker()
        self._skip_switch: threading.Event | None = None  # set by the wait screen's skip
        self._switch_screen: SwitchWaitScreen | None = None
        self.launch_guards: str | None = None  # the container a launch's own watchdog covers
        # Held by reference: log lines may land while the screen goes. The app places it
        # below both columns, so an engine's log gets the screen's whole width; with no
        # engine it is hidden (`-idle`) and the presets take the room.
        self.log_pane = LogPane(self._runtime, id="log-pane", classes="-idle")

    def compose(self) -> ComposeResult:
        yield PresetTable(id="preset-table")
        # held: each telemetry sample drawn moves its uptime (EngineCard.sampled)
        self.card = EngineCard(id="engine-card")
        yield self.card.data_bind(
            report=LaunchArea.report, failure=LaunchArea.failure, failure_log=LaunchArea.failure_log
        )

    def watch_rows(self, rows: list[PresetRow]) -> None:
        if not self.is_mounted:
            return
        table = self.query_one(PresetTable)
        if not rows and not table.row_count:
            return  # the binding's first value, before any catalog: no refill, no worker
        table.show_rows(rows)
        table.read_model_sizes(list(self.catalog.presets.values()))

    def watch_docker(self, docker: EngineReading | DockerFailure | None) -> None:
        if isinstance(docker, DockerFailure):
            self.report = failed_report(self.report, docker.error, docker.not_answering)
            return
        if docker is None:
            return
        if self.report.phase is None:  # a running launch reports more than Docker
            self.report = EngineReport(reading=docker, guard_stop=self.report.guard_stop)
        engine = docker.engine
        self.log_pane.follow(engine.container_id if engine else None, engine.name if engine else "")
        self.log_pane.set_class(engine is None, "-idle")

    def guard_stopped(self, reasons: str) -> None:
        """The running watchdog is stopping the engine: the card says why until a launch."""
        self.report = replace(self.report, guard_stop=f"stopped by the memory guard: {reasons}")

    # ----- keys ---------------------------------------------------------------------------

    def launch_selected(self) -> None:
        preset_id = self.query_one(PresetTable).selected_id()
        if preset_id is None or preset_id not in self.catalog.presets:
            self.notify("no preset selected", severity="warning")
        elif self.busy():
            self.notify("a launch or stop is already running", severity="warning")
        else:
            self._plan_launch(preset_id)

    def on_data_table_row_selected(self, event: PresetTable.RowSelected) -> None:
        self.launch_selected()  # enter on a preset row

    def stop_engine(self) -> None:
        if self.busy():
            self.notify("a launch or stop is already running", severity="warning")
            return
        if self.report.docker_not_answering:  # the answer takes seconds: say so now
            self.notify(
                "Docker is not answering; asking it to stop the engine anyway "
                "(a reply or a failure within seconds)",
                title="stop",
                severity="warning",
                markup=False,
            )
        self._plan_stop()

    def show_last_failure(self) -> None:
        """Show the recorded failed launch (by this window, the CLI or another TUI) on the
        engine card; it stays until dismissed or a launch succeeds."""
        failure = last_failure()
        self.failure_log = tuple(failure_log(failure, CARD_LOG_LINES))
        self.failure = failure_text(failure)

    def dismiss_failure(self) -> None:
        clear_failure()
        self.failure, self.failure_log = None, ()

    def busy(self) -> bool:
        """A launch or stop is being planned or run."""
        return any(w.group == "launch" and not w.is_finished for w in self.workers)

    @property
    def _flow(self) -> LaunchFlow:
        """The launch sequence, made by the first plan's worker (see the imports). Workers of
        the "launch" group never overlap (busy()), so it is made once."""
        if self._flow_made is None:
            from sparkdeck.launch.plan import LaunchFlow

            flush, guard = self._flow_args
            self._flow_made = LaunchFlow(self._runtime, flush=flush, guard=guard)
        return self._flow_made

    # ----- workers --------------------------------------------------------------------------

    @work(
        thread=True,
        group="launch",
        name="plan launch",
        exit_on_error=False,
        description="ask Docker what a launch would stop",
    )
    def _plan_launch(self, preset_id: str) -> None:
        self.post_message(self.Planned(self._flow.plan(self.catalog.get(preset_id))))

    @work(
        thread=True,
        group="launch",
        name="plan stop",
        exit_on_error=False,
        description="ask Docker what a stop would stop",
    )
    def _plan_stop(self) -> None:
        self.post_message(self.Planned(self._flow.plan_stop()))

    @work(
        thread=True,
        group="launch",
        name="launch",
        exit_on_error=False,
        description="pull, stop the running engine, flush, start, wait for health",
    )
    def _run_launch(self, plan: LaunchPlan, force: bool, skip: threading.Event) -> None:
        from sparkdeck.service.control import engine_control

        try:
            # the service when it runs (its guard goes on after this window closes), else
            # this window: engine_control decides, not this code
            with contextlib.closing(engine_control(lambda: self._flow, start=False)) as control:
                if control.by:
                    self.post_message(
                        self.ServiceStepped(
                            "launching", f"the sparkdeck service launches {plan.preset.id}"
                        )
                    )
                control.launch(
                    plan,
                    functools.partial(self._on_event, by_service=bool(control.by)),
                    force=force,
                    skip=skip,
                )
        except Exception as exc:
            reasoned = with_engine_reason(exc)
            if reasoned is exc:
                raise
            raise reasoned from exc
        finally:
            self.post_message(self.Finished("launch"))

    @work(
        thread=True,
        group="launch",
        name="stop",
        exit_on_error=False,
        description="stop the engine sparkdeck started",
    )
    def _run_stop(self) -> None:
        from sparkdeck.service.control import engine_control

        try:  # the service when it runs (each step comes back as the card's), else this one
            with contextlib.closing(engine_control(lambda: self._flow, start=False)) as control:
                control.stop(lambda event: self.post_message(self.Progressed(event)))
        finally:
            self.post_message(self.Finished("stop"))

    def _on_event(self, event: LaunchEvent, by_service: bool = False) -> None:
        """Each launch event, called in the launch thread: its own hook (launch_hooks), then
        the card's step. `by_service`: the service runs the launch and guards the engine,
        so nothing is handed to this window's watchdog."""
        from sparkdeck.ui.dashboard.launch_hooks import LaunchHooks, ServiceLaunchHooks

        event.deliver(ServiceLaunchHooks(self) if by_service else LaunchHooks(self))
        self.post_message(self.Progressed(event))

    def on_worker_state_changed(self, event: Worker.StateChanged) -> None:
        report_worker_failure(self.app, event)  # StateChanged does not bubble

    # ----- plan, confirm, run ---------------------------------------------------------------

    def on_launch_area_planned(self, message: messages.Planned) -> None:
        from sparkdeck.launch.plan import StopPlan  # loaded by the plan's worker already
        from sparkdeck.ui.screens.dialogs import ConfirmScreen  # with the first plan

        plan = message.plan
        if isinstance(plan, StopPlan):
            if not plan.stopping:
                self.notify(plan.lines()[0])
                return
            screen = ConfirmScreen("Stop the engine?", plan.lines(), "Stop")
            self.app.push_screen(screen, lambda yes: self._start_stop() if yes else None)
            return
        fit = plan.fit
        if fit is None or fit.allowed:
            self._confirm_launch(plan, False)
        else:  # "Launch anyway" means force; Cancel (the default) launches nothing
            from sparkdeck.ui.guard.screens import FitModal  # loaded here, not for frame 1

            self.app.push_screen(
                FitModal(plan.preset.id, fit),
                lambda anyway: self._confirm_launch(plan, True) if anyway else None,
            )

    def _confirm_launch(self, plan: LaunchPlan, force: bool) -> None:
        from sparkdeck.ui.screens.dialogs import ConfirmScreen

        verb = "Switch" if plan.is_switch else "Launch"
        title = (
            f"Switch to {plan.preset.id}" if plan.is_switch else f"Launch {plan.preset.id}"
        ) + (" anyway?" if force else "?")
        lines = plan.lines() + (["forced: the guard's verdict is overridden"] if force else [])
        self.app.push_screen(
            ConfirmScreen(title, lines, f"{verb} anyway" if force else verb),
            lambda yes: self._start_launch(plan, force) if yes else None,
        )

    def _start_launch(self, plan: LaunchPlan, force: bool = False) -> None:
        self._pull = PullTracker()
        self._skip_switch = threading.Event()
        self._run_launch(plan, force, self._skip_switch)
        self.report = launch_report(self.report, plan.preset.id)
        self.post_message(self.RunChanged(True))

    def _start_stop(self) -> None:
        self._run_stop()
        self.report = stop_report(self.report, time.time())
        self.post_message(self.RunChanged(True))

    def on_launch_area_progressed(self, message: messages.Progressed) -> None:
        from sparkdeck.ui.dashboard.card_steps import report_after  # with the first event

        self.report = report_after(self.report, message.event, self._pull)
        engine = self.report.reading.engine if self.report.reading else None
        if engine is not None:
            self.log_pane.follow(engine.container_id, engine.name)

    def on_launch_area_service_stepped(self, message: messages.ServiceStepped) -> None:
        self.report = replace(
            self.report,
            phase=message.phase or self.report.phase,
            detail=message.text or self.report.detail,
        )

    async def on_launch_area_switch_progressed(self, message: messages.SwitchProgressed) -> None:
        from sparkdeck.guard.switch import TIMED_OUT  # loaded with the event that brought it

        progress, screen = message.progress, self._switch_screen
        if progress.state == TIMED_OUT:  # the CLI warns too: the launch goes on at a risk
            self.notify(
                progress.describe(),
                title=f"{message.engine_name}: switch wait timed out",
                severity="warning",
                timeout=30,
                markup=False,
            )
        if screen is None:
            if progress.done:  # memory was back at the first look: nothing to wait for
                return
            from sparkdeck.ui.guard.screens import SwitchWaitScreen  # with the first wait

            skip = self._skip_switch or threading.Event()
            screen = self._switch_screen = SwitchWaitScreen(message.engine_name, skip)
            await self.app.push_screen(screen)
        screen.show(progress)  # closes itself when the wait is over
        if progress.done:
            self._switch_screen = None

    def on_launch_area_finished(self, message: messages.Finished) -> None:
        screen, self._switch_screen = self._switch_screen, None
        if screen is not None and screen.is_attached and screen in self.app.screen_stack:
            screen.dismiss(None)  # no wait screen may outlive its launch
        self.show_last_failure()
        self.report = replace(
            self.report,
            phase=None,
            detail="",
            pull_fraction=None,
            previous=None,
            launching="",
            stop_deadline=None,
        )
        self.post_message(self.RunChanged(False))
