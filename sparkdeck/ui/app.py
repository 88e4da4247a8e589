"""The sparkdeck Textual app: composition, key bindings, thin worker wrappers, message handlers.

Readers, settings and the sampler come in through the constructor (tests hand in their own).
The app reads presets and Docker in workers (bodies in sparkdeck.ui.messages) and binds what it
learns into the panels, which own their features' workers (failures: report_worker_failure)."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, ClassVar

from textual import work
from textual.app import App, ComposeResult, SystemCommand
from textual.binding import BindingType
from textual.reactive import var
from textual.screen import Screen
from textual.widgets import Footer, Header
from textual.worker import Worker, get_current_worker

from sparkdeck.catalog import PresetCatalog
from sparkdeck.config.settings import Settings
from sparkdeck.runtime import connect
from sparkdeck.ui import gc_tuning
from sparkdeck.ui.dashboard import launch_messages
from sparkdeck.ui.dashboard.engine_card import DockerFailure
from sparkdeck.ui.dashboard.launch import LaunchArea
from sparkdeck.ui.engine_watch import EngineWatch
from sparkdeck.ui.guard.watchdog_line import WatchdogLine, follow_engine
from sparkdeck.ui.history import HistoryKeeper, PostMortemFound
from sparkdeck.ui.keymap import BINDINGS, apply_keymap
from sparkdeck.ui.machine.environment import EnvironmentReport
from sparkdeck.ui.messages import (
    CatalogLoaded,
    ChatTargetRead,
    DockerConnectionFailed,
    EngineStateRead,
    GuardDecisionMade,
    catalog_loaded,
    read_presets,
    report_worker_failure,
)
from sparkdeck.ui.readers import ChatTarget, EngineReader, EngineReading, answers
from sparkdeck.ui.screen_layout import (
    AfterFirstFrame,
    BlankColumn,
    BlankRow,
    presized,
    put_in_place,
)
from sparkdeck.ui.screens.palette import (
    PaletteCommand,
    SparkdeckCommands,
    key_and_theme_commands,
    without_duplicates,
)
from sparkdeck.ui.screens.views import open_view
from sparkdeck.ui.service_feed import ServiceFeed
from sparkdeck.ui.strip.glance import GlanceStrip
from sparkdeck.ui.themes import install_themes, keep_theme_saved, next_theme

if TYPE_CHECKING:  # the side tabs' modules load after the first frame (_side_tabs)
    from sparkdeck.guard.timeline import StartupTimeline
    from sparkdeck.runtime.client import DockerRuntime
    from sparkdeck.runtime.state import EngineState
    from sparkdeck.ui.chat.tab import ChatTab
    from sparkdeck.ui.dashboard.side_tabs import Sampling, SideTabs
    from sparkdeck.ui.metrics.tab import MetricsTab

ENGINE_POLL_SECONDS = 2.0
CatalogLoader = Callable[[], PresetCatalog]
RuntimeFactory = Callable[[], "DockerRuntime"]


class SparkdeckApp(App[int]):
    """Presets, engine card and log; tabs for machine, metrics, chat, guard; watchdog line."""

    TITLE = "sparkdeck"
    SUB_TITLE = "inference engines on a DGX Spark"
    CSS_PATH = "sparkdeck.tcss"
    COMMANDS = App.COMMANDS | {SparkdeckCommands}
    # The arrows and `l` work on the presets from the start. Textual's default ("*") found the
    # log pane first, hidden while no engine runs: the arrows moved nothing on screen.
    AUTO_FOCUS = "#preset-table"
    # sparkdeck.ui.keymap's: one id each, remappable in settings.toml
    BINDINGS: ClassVar[list[BindingType]] = [*BINDINGS]
    # Screen classes the stylesheet lays out by (80, 120 and 200 columns: docs/dashboard.md)
    HORIZONTAL_BREAKPOINTS = [(0, "-narrow"), (110, "-normal"), (170, "-wide")]
    VERTICAL_BREAKPOINTS = [(0, "-short"), (40, "-tall")]

    docker: var[EngineReading | DockerFailure | None] = var(None, always_update=True)
    catalog: var[PresetCatalog] = var(PresetCatalog({}, []))
    rows: var[list] = var(list)
    environment: var[EnvironmentReport] = var(EnvironmentReport())
    chat_target: var[ChatTarget] = var(ChatTarget(None))  # chat and metrics
    guarded_engine: var[EngineState | None] = var(None, always_update=True)
    launching: var[bool] = var(False)  # a launch or stop runs
    fast_sampling: var[bool] = var(False)  # an engine starts: telemetry at 2 Hz
    timeline: var[StartupTimeline | None] = var(None)  # the last launch's, for the guard tab

    def __init__(
        self,
        catalog_loader: CatalogLoader = read_presets,
        runtime_factory: RuntimeFactory = connect,
        *,
        settings: Settings | None = None,
        sampling: Sampling | None = None,
        flush: bool | None = None,
        health_check: Callable[[str], bool] = answers,
        engine_poll_seconds: float = ENGINE_POLL_SECONDS,
        tune_gc: bool = False,
        lazy_side_tabs: bool = False,
        service_feed: ServiceFeed | None = None,
    ) -> None:
        super().__init__()
        self._tune_gc = tune_gc  # run_app's choice: see sparkdeck.ui.gc_tuning
        # run_app's too: the side tabs load and mount after the first frame
        # (ui.screen_layout); tests mount them with the rest, to query them from the start
        self._lazy_side_tabs = lazy_side_tabs
        self.side_tabs: SideTabs | None = None
        # the side tabs' (chat and its palette commands), once they are mounted
        self.chat_tab: ChatTab | None = None
        self.metrics_tab: MetricsTab | None = None
        self.catalog_loader = catalog_loader
        self._engine_reader = EngineReader(runtime_factory, health_check)
        self.settings = settings or Settings()
        self._cache_flush = flush  # not `_flush`: that name is Textual App's own method
        self._sampling = sampling  # the side tabs' (None: the real sampler, the usual pace)
        self._engine_watch = EngineWatch(
            self._engine_reader, self.post_message, engine_poll_seconds
        )
        # what the service reads already (telemetry, Docker): drawn, not read again
        self.service_feed = service_feed or ServiceFeed()
        self._engine_watch.follow(self.service_feed)
        self._problems = apply_keymap(self, self.settings.keys)
        self._theme_names, theme_problems = install_themes(self, self.settings.ui.theme)
        # the history view, the post-mortem check
        self.flight_history: HistoryKeeper = HistoryKeeper(self)
        self._problems += [("theme not loaded", problem) for problem in theme_problems]

    def get_default_screen(self) -> Screen:
        # the layout classes for the terminal's size, given before the first styling: set by
        # the first resize instead, they restyled every widget before the first frame
        return presized(super().get_default_screen(), self)

    def compose(self) -> ComposeResult:
        # Held by reference: workers' messages reach them while a dialog is the screen.
        self.launch_area = LaunchArea(
            self._engine_reader.runtime,
            self._cache_flush,
            self.settings.guard,
            self._hand_over,
            id="left-area",
        ).data_bind(
            docker=SparkdeckApp.docker, catalog=SparkdeckApp.catalog, rows=SparkdeckApp.rows
        )
        self.strip = GlanceStrip(self.settings.guard, id="glance-strip")  # the side tabs feed it
        self.watchdog_line = WatchdogLine(
            lambda: self.settings.guard,
            self._engine_reader.runtime,
            self.service_feed,
            id="watchdog-line",
        )
        # The one-row widgets above and below the columns each in a blank container of its
        # own: a frame that repaints rows in the columns (each sample) then renders none of
        # them, where each of the screen's own children is rendered in every frame
        # (ui/screen_layout.py)
        with BlankColumn(id="header-area"):
            yield Header()
        with BlankColumn(id="glance-area"):
            yield self.strip.data_bind(docker=SparkdeckApp.docker)  # at a glance
        with BlankRow(id="main-area"):
            yield self.launch_area
            if self._lazy_side_tabs:
                self._side_stand_in = AfterFirstFrame(id="side-area-pending")
                yield self._side_stand_in
            else:
                yield self._side_tabs()
        yield self.launch_area.log_pane  # the whole width, shown while an engine runs
        with BlankColumn(id="watchdog-area"):
            yield self.watchdog_line.data_bind(
                engine=SparkdeckApp.guarded_engine, launching=SparkdeckApp.launching
            )
        with BlankColumn(id="footer-area"):
            yield Footer()

    def _side_tabs(self) -> SideTabs:
        """The machine, metrics, chat and guard tabs, their modules loaded now."""
        from sparkdeck.ui.dashboard.side_tabs import Sampling, SideTabs

        tabs = self.side_tabs = SideTabs(
            (self._sampling or Sampling())._replace(feed=self.service_feed),
            self.settings.guard,
            lambda preset_id: self.catalog.presets.get(preset_id),  # the catalog of now
            self.strip,
            lambda: self.launch_area.card.sampled(),  # the uptime moves with each sample
            id="side-area",
        ).data_bind(
            environment=SparkdeckApp.environment,
            fast_sampling=SparkdeckApp.fast_sampling,
            chat_target=SparkdeckApp.chat_target,
            timeline=SparkdeckApp.timeline,
        )
        self.chat_tab, self.metrics_tab = tabs.chat_tab, tabs.metrics_tab
        return tabs

    def on_mount(self) -> None:
        for title, problem in self._problems:
            self.notify(problem, title=title, severity="warning", markup=False)
        keep_theme_saved(self, self.settings.ui.theme)
        # The first frame is painted before the side tabs load and any reader starts: they
        # would otherwise compete with it for the interpreter (see benchmarks/tui_idle.py).
        if self._lazy_side_tabs:
            self.call_after_refresh(put_in_place, self._side_stand_in, self._side_tabs)
        self.call_after_refresh(self._start_readers)

    def _start_readers(self) -> None:
        if self._tune_gc:  # the frame is on screen: collect again (ui.gc_tuning)
            gc_tuning.after_first_frame(self.set_timer)
        self.load_presets()
        self.service_feed.start()
        self.watch_engine()  # reads at once, then whenever something changes
        self.launch_area.show_last_failure()  # a launch that failed before this window
        self.flight_history.check_postmortem()  # the recorder's post-mortem of an unclean end

    def action_launch(self) -> None:
        self.launch_area.launch_selected()

    def action_stop(self) -> None:
        self.launch_area.stop_engine()

    def action_dismiss_failure(self) -> None:
        self.launch_area.dismiss_failure()
        self.refresh_bindings()

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if action == "dismiss_failure":  # offered only while the card shows a failure
            # (App.is_mounted is a method, always true here: before compose no area exists)
            area = getattr(self, "launch_area", None)
            return area is not None and area.failure is not None
        return super().check_action(action, parameters)

    def action_refresh(self) -> None:
        """Run the preset and engine readers again (each group keeps only its newest run)."""
        self.load_presets()
        self._engine_watch.poll_now()
        self.launch_area.show_last_failure()  # one recorded since (by the CLI or the service)
        self.refresh_bindings()  # `x` follows the failure shown

    def action_next_theme(self) -> None:
        self.theme = next_theme(self._theme_names, self.theme)

    def action_open(self, view: str) -> None:
        """Help, benchmarks, models, history or connect (sparkdeck.ui.screens.views)."""
        open_view(self, view)

    def on_post_mortem_found(self, message: PostMortemFound) -> None:
        self.flight_history.show(message)

    async def action_show_tab(self, tab: str) -> None:
        """Open a side tab. Leaving the chat (or any tab the keys were in) for another gives
        the keys back to the presets: the arrows move them and `l` launches the one they
        highlight, without Tab presses (they were left on the tab bar before)."""
        if self.side_tabs is None:  # None in the moment before the first frame
            return
        focused = self.screen.focused
        if tab != "chat-tab" and focused is not None and self.side_tabs in focused.ancestors:
            # now, not after the next message (Widget.focus): the tabs ask where focus is
            self.screen.set_focus(self.launch_area.query_one("#preset-table"))
        await self.side_tabs.show(tab)

    def get_system_commands(self, screen: Screen) -> Iterable[SystemCommand]:
        yield from without_duplicates(super().get_system_commands(screen), self.palette_commands())

    def palette_commands(self) -> list[PaletteCommand]:
        """Every key action, each theme by name and the chat pane's actions."""
        from sparkdeck.ui.chat.tab import chat_commands  # loaded when the palette opens

        return key_and_theme_commands(self, self.BINDINGS) + chat_commands(self)

    @work(
        thread=True,
        exclusive=True,
        group="catalog",
        name="load presets",
        description="read and check the preset files",
        exit_on_error=False,
    )
    def load_presets(self) -> None:
        loaded = catalog_loaded(self.catalog_loader, self.settings.guard)
        if not get_current_worker().is_cancelled:
            self.post_message(loaded)

    @work(
        thread=True,
        exclusive=True,
        group="engine",
        name="watch engine",
        description="ask Docker for the current sparkdeck engine",
        exit_on_error=False,
    )
    def watch_engine(self) -> None:
        self._engine_watch.run(get_current_worker().cancelled_event, lambda: self.is_running)

    def on_unmount(self) -> None:
        self._engine_watch.close()  # its thread ends now, not at its next poll
        self.service_feed.close()

    def on_worker_state_changed(self, event: Worker.StateChanged) -> None:
        """The one place worker failures end up (widgets forward theirs here too)."""
        report_worker_failure(self, event)

    def on_catalog_loaded(self, message: CatalogLoaded) -> None:
        self.catalog, self.rows = message.catalog, message.rows
        self.environment = self.environment.with_presets(
            len(message.catalog.presets), message.catalog.problems
        )

    def on_engine_state_read(self, message: EngineStateRead) -> None:
        self.docker = message.reading
        self.environment = self.environment.with_docker(None)
        self.on_launch_area_run_changed()  # the engine moved on

    def on_docker_connection_failed(self, message: DockerConnectionFailed) -> None:
        self.docker = DockerFailure(message.error, message.not_answering)
        self.environment = self.environment.with_docker(message.error)

    def on_chat_target_read(self, message: ChatTargetRead) -> None:
        self.chat_target = message.target  # metrics read the engine chat talks to

    def on_launch_area_run_changed(self, message: launch_messages.RunChanged | None = None) -> None:
        """Sampling speed and the running watchdog follow the engine and the launch."""
        busy = self.launching = self.launch_area.busy()
        if not busy:
            self.launch_area.launch_guards = None  # no launch runs now: none covers one
        if message is not None:
            self._engine_watch.poll_now()  # a launch or stop began or ended: read Docker now
        self.fast_sampling, self.guarded_engine = follow_engine(
            self.docker, busy, self.launch_area.launch_guards
        )

    def _hand_over(self, engine: EngineState) -> None:
        """The launch's watchdog is done with `engine`: the running one takes it (launch thread)."""
        self.launch_area.launch_guards = None
        self.guarded_engine = engine

    def on_guard_decision_made(self, message: GuardDecisionMade) -> None:
        self.watchdog_line.decided(message.decision)  # a launch's start-up watchdog

    def on_watchdog_line_engine_stopped(self, message: WatchdogLine.EngineStopped) -> None:
        self.launch_area.guard_stopped(message.reasons)

    def on_launch_area_timeline_recorded(self, message: launch_messages.TimelineRecorded) -> None:
        self.timeline = message.timeline
