"""The sparkdeck Textual app: composition, key bindings, thin worker wrappers, message handlers.

Readers, settings and the sampler come in through the constructor, never from module globals,
so tests hand the app their own preset directories, Docker connections and fixed telemetry.
Every blocking call (Docker, NVML, /proc, files) runs in a thread worker that posts a message;
worker failures all end in `on_worker_state_changed`.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import replace
from typing import TYPE_CHECKING

from textual import work
from textual.app import App, ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.reactive import reactive
from textual.widgets import Footer, Header, Static, TabbedContent, TabPane
from textual.worker import Worker, WorkerState, get_current_worker

from sparkdeck.docker_errors import DockerUnavailable
from sparkdeck.launch_flow import LaunchFlow
from sparkdeck.presets import PresetCatalog, load_catalog
from sparkdeck.pull_progress import PullTracker
from sparkdeck.settings import Settings, SettingsError, load_settings, save_setting
from sparkdeck.telemetry import History, TelemetrySampler
from sparkdeck.ui.chat_tab import ChatTab, chat_commands
from sparkdeck.ui import gc_tuning
from sparkdeck.ui.engine_card import EngineCard, EngineReport
from sparkdeck.ui.engine_metrics_panel import EngineMetricsPanel
from sparkdeck.ui.guard_widgets import TimelineChart, WatchdogLine
from sparkdeck.ui.guard_wiring import GuardWiring
from sparkdeck.ui.help_screen import HelpScreen, binding_rows, pane_rows
from sparkdeck.ui.launch_controls import LaunchControls
from sparkdeck.ui.log_pane import LogPane
from sparkdeck.ui.messages import (
    CatalogLoaded, ChatTargetRead, DockerConnectionFailed, EngineStateRead, LogLinesRead,
    TelemetrySampled,
)
from sparkdeck.ui.palette import PaletteCommand, SparkdeckCommands
from sparkdeck.ui.panels.gpu import GpuPanel
from sparkdeck.ui.panels.memory import MemoryPanel
from sparkdeck.ui.metrics_wiring import MetricsWiring
from sparkdeck.ui.readers import (
    ChatTarget, EngineReader, chat_target, endpoint_answers, memory_total, preset_rows,
)
from sparkdeck.ui.tab_controls import GUARD_NOTE, TAB_BINDINGS, TabControls
from sparkdeck.ui.themes import load_themes, next_theme
from sparkdeck.ui.widgets import EnvironmentPanel, EnvironmentReport, PresetTable

if TYPE_CHECKING:
    from sparkdeck.docker_runtime import DockerRuntime
    from sparkdeck.engine_state import EngineState
    from sparkdeck.log_follow import LogFollower

ENGINE_POLL_SECONDS = 2.0
FREEZE_AFTER_S = 3.0  # start-up objects are frozen this long after the first frame
SAMPLE_SECONDS = 1.0  # telemetry once a second ...
STARTING_SAMPLE_SECONDS = 0.5  # ... twice while an engine starts, the dangerous phase

CatalogLoader = Callable[[], PresetCatalog]
RuntimeFactory = Callable[[], "DockerRuntime"]


def connect_docker() -> DockerRuntime:
    """DockerRuntime.connect, imported when first called: the docker SDK is not needed for
    the first frame, and loading it costs a tenth of a second."""
    from sparkdeck.docker_runtime import DockerRuntime

    return DockerRuntime.connect()


class SparkdeckApp(LaunchControls, GuardWiring, MetricsWiring, TabControls, App[int]):
    """The dashboard: presets, engine card and log on the left; on the right tabs for the
    machine, the engine's metrics, chat and the memory guard; the watchdog's line below."""

    TITLE = "sparkdeck"
    SUB_TITLE = "inference engines on a DGX Spark"
    CSS_PATH = "sparkdeck.tcss"
    COMMANDS = App.COMMANDS | {SparkdeckCommands}

    BINDINGS = [
        Binding("l", "launch", "Launch", tooltip="Launch the selected preset, stopping "
                "(switching from) the running engine after a confirmation", id="launch"),
        Binding("s", "stop", "Stop", tooltip="Stop the engine sparkdeck started", id="stop"),
        Binding("t", "next_theme", "Theme", tooltip="Switch to the next theme (kept in "
                "settings.toml)", id="theme"),
        Binding("r", "refresh", "Refresh", tooltip="Read presets and Docker again",
                id="refresh"),
        *TAB_BINDINGS,
        Binding("question_mark,f1", "help", "Help", key_display="?", id="help"),
        Binding("q", "quit", "Quit", id="quit"),
    ]

    engine_report: reactive[EngineReport] = reactive(EngineReport())
    environment: reactive[EnvironmentReport] = reactive(EnvironmentReport())
    ready_engine: reactive[EngineState | None] = reactive(None)  # metrics and the watchdog
    chat_target: reactive[ChatTarget] = reactive(ChatTarget(None))  # what chat talks to

    def __init__(self, catalog_loader: CatalogLoader = load_catalog,
                 runtime_factory: RuntimeFactory = connect_docker, *,
                 settings: Settings | None = None, sampler: TelemetrySampler | None = None,
                 history: History | None = None, flush: bool | None = None,
                 health_check: Callable[[str], bool] = endpoint_answers,
                 engine_poll_seconds: float = ENGINE_POLL_SECONDS,
                 sample_seconds: float = SAMPLE_SECONDS,
                 starting_sample_seconds: float = STARTING_SAMPLE_SECONDS,
                 tune_gc: bool = False) -> None:
        super().__init__()
        self._tune_gc = tune_gc  # run_app's choice: see sparkdeck.ui.gc_tuning
        self._catalog_loader = catalog_loader
        self._engine_reader = EngineReader(runtime_factory, health_check)
        self.settings = settings or Settings()
        self._flow = LaunchFlow(self._engine_reader.runtime, flush=flush,
                                guard=self.settings.guard)
        self._saved_theme = self.settings.ui.theme
        self._sampler = sampler or TelemetrySampler()
        self._history = history or History()
        self._engine_poll_seconds = engine_poll_seconds
        self._sample_periods = (sample_seconds, starting_sample_seconds)
        self._fast_sampling = False
        self._catalog = PresetCatalog({}, [])
        self._pull = PullTracker()
        self._log_follower: LogFollower | None = None
        self._sample_lock = threading.Lock()
        # Themes are chosen before the stylesheet is first parsed: choosing one on mount
        # would parse it all again and hold the first frame back (benchmarks/tui_idle.py).
        themes, self._theme_problems = load_themes()
        for theme in themes:
            self.register_theme(theme)
        self._theme_names = [theme.name for theme in themes] or [self.theme]
        if self.settings.ui.theme in self.available_themes:
            self.theme = self.settings.ui.theme
        else:
            self._theme_problems.append(
                f"settings.toml: ui.theme: no theme named {self.settings.ui.theme!r}")

    # ----- composition --------------------------------------------------------------------

    def compose(self) -> ComposeResult:
        self._memory_panel = MemoryPanel(self.settings.guard, id="memory-panel")
        self._gpu_panel = GpuPanel(id="gpu-panel")
        # Held by reference: workers' messages reach them while a dialog is the screen.
        self.watchdog_line = WatchdogLine(id="watchdog-line")
        self.timeline_chart = TimelineChart(id="timeline-chart")
        self.chat_tab = ChatTab(id="chat-tab-body")
        yield Header()
        with Horizontal(id="main-area"):
            with Vertical(id="left-area"):
                yield PresetTable(id="preset-table")
                yield EngineCard(id="engine-card").data_bind(report=SparkdeckApp.engine_report)
                yield LogPane(id="log-pane")
            with TabbedContent(id="side-tabs"):
                with TabPane("machine", id="machine-tab"):
                    yield self._memory_panel
                    yield self._gpu_panel
                    yield EnvironmentPanel(id="environment-panel").data_bind(
                        report=SparkdeckApp.environment)
                with TabPane("metrics", id="metrics-tab"):
                    yield EngineMetricsPanel(id="engine-metrics").data_bind(
                        trail=SparkdeckApp.metrics_trail)
                with TabPane("chat", id="chat-tab"):
                    yield self.chat_tab.data_bind(target=SparkdeckApp.chat_target)
                with TabPane("guard", id="guard-tab"):
                    yield self.timeline_chart
                    yield Static(GUARD_NOTE, id="guard-note", markup=False)
        yield self.watchdog_line
        yield Footer()

    def on_mount(self) -> None:
        for problem in self._theme_problems:
            self.notify(problem, title="theme not loaded", severity="warning", markup=False)
        self.theme_changed_signal.subscribe(self, lambda theme: self.save_theme(theme.name))
        # The first frame is painted before any reader starts: their threads would otherwise
        # compete with it for the interpreter (see benchmarks/tui_idle.py).
        self.call_after_refresh(self._start_readers)

    def _start_readers(self) -> None:
        if self._tune_gc:  # after the first data: the collection takes tens of ms
            self.set_timer(FREEZE_AFTER_S, gc_tuning.freeze_startup_objects)
        self.sample_telemetry()
        self.action_refresh()
        self.set_interval(self._engine_poll_seconds, self._poll_engine, name="engine poll")

    async def on_unmount(self) -> None:
        self.stop_watchdog()
        if self._log_follower is not None:
            self._log_follower.close()
        await self.close_metrics()

    # ----- actions ------------------------------------------------------------------------

    def action_refresh(self) -> None:
        """Run the preset and engine readers again (each group keeps only its newest run)."""
        self.load_presets()
        self.read_engine()

    def action_help(self) -> None:
        if not isinstance(self.screen, HelpScreen):
            self.push_screen(HelpScreen(binding_rows(self, self.BINDINGS) + pane_rows(self)))

    def action_next_theme(self) -> None:
        self.theme = next_theme(self._theme_names, self.theme)

    def palette_commands(self) -> list[PaletteCommand]:
        """Every key action, and each theme by name, for the command palette."""
        commands = [PaletteCommand(b.description, b.tooltip or b.description,
                                   lambda action=b.action: self.run_action(action))
                    for b in self.BINDINGS if isinstance(b, Binding)]
        commands += [PaletteCommand(f"Theme: {name}", f"switch to the {name} theme",
                                    lambda name=name: setattr(self, "theme", name))
                     for name in sorted(self.available_themes)]
        return commands + chat_commands(self)

    def _poll_engine(self) -> None:
        # A timer tick never queues behind a read that is still waiting on a slow daemon.
        if not any(w.group == "engine" and not w.is_finished for w in self.workers):
            self.read_engine()

    def _set_fast_sampling(self, fast: bool) -> None:
        if fast != self._fast_sampling:
            self._fast_sampling = fast
            self.sample_telemetry()  # exclusive: the running loop ends, a new one starts now

    # ----- workers: blocking calls, results posted as messages -----------------------------

    @work(thread=True, exclusive=True, group="telemetry", name="sample telemetry",
          description="read memory, PSI, NVML and power rails", exit_on_error=False)
    def sample_telemetry(self) -> None:
        worker = get_current_worker()
        period = self._sample_periods[1 if self._fast_sampling else 0]
        # is_running too: a loop started while the app shuts down is never cancelled, and an
        # endless thread would keep the process from exiting.
        while not worker.is_cancelled and self.is_running:
            with self._sample_lock:  # a loop being replaced may still be mid-sample
                snapshot = self._sampler.sample()
                self._history.add(snapshot)
                history = self._history.frozen()
            self.post_message(TelemetrySampled(snapshot, history))
            worker.cancelled_event.wait(period)

    @work(thread=True, exclusive=True, group="catalog", name="load presets",
          description="read and check the preset files", exit_on_error=False)
    def load_presets(self) -> None:
        catalog = self._catalog_loader()
        rows = preset_rows(catalog, memory_total(), self.settings.guard)
        if not get_current_worker().is_cancelled:
            self.post_message(CatalogLoaded(catalog, rows))

    @work(thread=True, exclusive=True, group="engine", name="read engine",
          description="ask Docker for the current sparkdeck engine", exit_on_error=False)
    def read_engine(self) -> None:
        reading = None
        try:
            reading = self._engine_reader.read()
            message: EngineStateRead | DockerConnectionFailed = EngineStateRead(reading)
        except DockerUnavailable as exc:
            message = DockerConnectionFailed(str(exc))
        if get_current_worker().is_cancelled:
            return
        self.post_message(message)
        target = chat_target(reading, self._engine_reader.health_check)
        if not get_current_worker().is_cancelled:
            self.post_message(ChatTargetRead(target))

    @work(thread=True, exclusive=True, group="logs", name="follow logs", exit_on_error=False,
          description="follow the engine container's log")
    def follow_logs(self, follower: LogFollower) -> None:
        for lines in follower.batches():
            self.post_message(LogLinesRead(follower.container_id, lines))

    def on_worker_state_changed(self, event: Worker.StateChanged) -> None:
        """The one place worker failures end up: a notification naming the error."""
        if event.state == WorkerState.ERROR:
            error = event.worker.error
            self.notify(str(error) or type(error).__name__, title=f"{event.worker.name} failed",
                        severity="error", markup=False)

    @work(thread=True, exclusive=True, group="settings", name="save theme",
          description="keep the theme in settings.toml", exit_on_error=False)
    def save_theme(self, name: str) -> None:
        if name != self._saved_theme:
            save_setting("ui", "theme", name)
            self._saved_theme = name

    # ----- messages to state --------------------------------------------------------------

    def on_catalog_loaded(self, message: CatalogLoaded) -> None:
        self._catalog = message.catalog
        self.query_one(PresetTable).show_rows(message.rows)
        self.environment = replace(
            self.environment, preset_count=len(message.catalog.presets),
            problems=tuple(str(problem) for problem in message.catalog.problems))

    def on_engine_state_read(self, message: EngineStateRead) -> None:
        if self.engine_report.phase is None:  # a running launch reports more than Docker
            self.engine_report = EngineReport(reading=message.reading,
                                              guard_stop=self.engine_report.guard_stop)
        self.environment = replace(self.environment, docker_reachable=True, docker_error=None)
        engine = message.reading.engine
        self._follow(engine.container_id if engine else None, engine.name if engine else "")
        self._set_fast_sampling(message.reading.status == "starting" or self._busy())
        self.ready_engine = engine if message.reading.status == "ready" else None
        self.follow_metrics(self.ready_engine)
        self.follow_watchdog(None if self._busy() else self.ready_engine)

    def on_chat_target_read(self, message: ChatTargetRead) -> None:
        self.chat_target = message.target

    def on_docker_connection_failed(self, message: DockerConnectionFailed) -> None:
        self.engine_report = EngineReport(docker_error=message.error)
        self.environment = replace(self.environment, docker_reachable=False,
                                   docker_error=message.error)

    def _follow(self, container_id: str | None, name: str) -> None:
        if self.query_one(LogPane).follow(container_id, name):
            if self._log_follower is not None:
                self._log_follower.close()
            self._log_follower = None
            if container_id is not None:
                from sparkdeck.log_follow import LogFollower

                self._log_follower = LogFollower(self._engine_reader.runtime, container_id)
                self.follow_logs(self._log_follower)

    def on_log_lines_read(self, message: LogLinesRead) -> None:
        self.query_one(LogPane).add_lines(message.container_id, message.lines)

    def on_telemetry_sampled(self, message: TelemetrySampled) -> None:
        # Held by reference: a sample may land while the app is tearing its screen down.
        self._memory_panel.show(message.snapshot, message.history)
        self._gpu_panel.show(message.snapshot, message.history)



def run_app(catalog_loader: CatalogLoader = load_catalog,
            runtime_factory: RuntimeFactory = connect_docker) -> int:
    """Run the control panel in this terminal until the user quits; return the exit status."""
    problem = None
    try:
        settings = load_settings()
    except SettingsError as exc:
        settings, problem = Settings(), str(exc)
    gc_tuning.tune_for_ui()
    app = SparkdeckApp(catalog_loader, runtime_factory, settings=settings, tune_gc=True)
    if problem:
        app.call_later(app.notify, problem, title="settings.toml ignored", severity="error",
                       markup=False)
    app.run()
    return app.return_code or 0
