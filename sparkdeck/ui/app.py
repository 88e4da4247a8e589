"""The sparkdeck Textual app: composition, key bindings, thin worker wrappers, message handlers.

Readers come in through the constructor, never from module globals, so tests hand the app
their own preset directories and Docker connections. Every blocking read runs in a thread
worker that posts a message; worker failures all end in `on_worker_state_changed`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from textual import work
from textual.app import App, ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.reactive import reactive
from textual.widgets import Footer, Header
from textual.worker import Worker, WorkerState, get_current_worker

from sparkdeck.docker_errors import DockerUnavailable
from sparkdeck.docker_runtime import DockerRuntime
from sparkdeck.host.meminfo import MemInfoError, MemorySnapshot, read_meminfo
from sparkdeck.presets import PresetCatalog, load_catalog
from sparkdeck.ui.help_screen import HelpRow, HelpScreen
from sparkdeck.ui.messages import (
    CatalogLoaded, DockerConnectionFailed, EngineStateRead, EnvironmentChecked,
)
from sparkdeck.ui.readers import EngineReader, GpuStatus, endpoint_answers, preset_rows, probe_gpu
from sparkdeck.ui.themes import load_themes
from sparkdeck.ui.widgets import (
    EnginePanel, EngineReport, EnvironmentPanel, EnvironmentReport, PresetTable,
)

ENGINE_POLL_SECONDS = 2.0

CatalogLoader = Callable[[], PresetCatalog]
RuntimeFactory = Callable[[], DockerRuntime]


DEFAULT_THEME = "spark-dark"


class SparkdeckApp(App[int]):
    """The control panel: presets on the left, the engine and the machine on the right."""

    TITLE = "sparkdeck"
    SUB_TITLE = "inference engines on a DGX Spark"
    CSS_PATH = "sparkdeck.tcss"
    ENABLE_COMMAND_PALETTE = False

    BINDINGS = [
        Binding("r", "refresh", "Refresh", tooltip="Read presets, Docker and the host again",
                id="refresh"),
        Binding("q", "quit", "Quit", id="quit"),
        Binding("question_mark,f1", "help", "Help", key_display="?", id="help"),
    ]

    engine_report: reactive[EngineReport] = reactive(EngineReport())
    environment: reactive[EnvironmentReport] = reactive(EnvironmentReport())

    def __init__(self, catalog_loader: CatalogLoader = load_catalog,
                 runtime_factory: RuntimeFactory = DockerRuntime.connect, *,
                 gpu_probe: Callable[[], GpuStatus] = probe_gpu,
                 memory_reader: Callable[[], MemorySnapshot] = read_meminfo,
                 health_check: Callable[[str], bool] = endpoint_answers,
                 engine_poll_seconds: float = ENGINE_POLL_SECONDS) -> None:
        super().__init__()
        self._catalog_loader = catalog_loader
        self._engine_reader = EngineReader(runtime_factory, health_check)
        self._gpu_probe = gpu_probe
        self._memory_reader = memory_reader
        self._engine_poll_seconds = engine_poll_seconds

    # ----- composition --------------------------------------------------------------------

    def compose(self) -> ComposeResult:
        yield Header()
        with Horizontal(id="main-area"):
            yield PresetTable(id="preset-table")
            with Vertical(id="side-area"):
                yield EnginePanel(id="engine-panel").data_bind(
                    report=SparkdeckApp.engine_report)
                yield EnvironmentPanel(id="environment-panel").data_bind(
                    report=SparkdeckApp.environment)
        yield Footer()

    def on_mount(self) -> None:
        themes, problems = load_themes()
        for theme in themes:
            self.register_theme(theme)
        if DEFAULT_THEME in self.available_themes:
            self.theme = DEFAULT_THEME
        for problem in problems:
            self.notify(problem, title="theme not loaded", severity="warning")
        self.action_refresh()
        self.set_interval(self._engine_poll_seconds, self._poll_engine, name="engine poll")

    # ----- actions ------------------------------------------------------------------------

    def action_refresh(self) -> None:
        """Run every reader again (each worker group keeps only its newest run)."""
        self.load_presets()
        self.read_engine()
        self.check_environment()

    def action_help(self) -> None:
        if not isinstance(self.screen, HelpScreen):
            self.push_screen(HelpScreen(self.help_rows()))

    def help_rows(self) -> list[HelpRow]:
        """One line per key: the app's bindings, then keys that widgets and Textual add."""
        rows: list[HelpRow] = []
        for binding in self.BINDINGS:
            assert isinstance(binding, Binding)
            keys = [self.get_key_display(replace(binding, key=key, key_display=None))
                    for key in binding.key.split(",")]
            rows.append((" / ".join(keys), binding.description))
        rows += [
            ("↑ / ↓", "move through the presets"),
            ("← / →", "scroll the table sideways"),
            ("PgUp / PgDn", "a page up or down"),
            ("^home / ^end", "first / last preset"),
            ("^q", "quit, from any screen"),
            ("esc", "close this help"),
        ]
        return rows

    def _poll_engine(self) -> None:
        # A timer tick never queues behind a read that is still waiting on a slow daemon.
        if not any(w.group == "engine" and not w.is_finished for w in self.workers):
            self.read_engine()

    # ----- workers: blocking reads, results posted as messages -----------------------------

    @work(thread=True, exclusive=True, group="catalog", name="load presets",
          description="read and check the preset files", exit_on_error=False)
    def load_presets(self) -> None:
        catalog = self._catalog_loader()
        rows = preset_rows(catalog)
        if not get_current_worker().is_cancelled:
            self.post_message(CatalogLoaded(catalog, rows))

    @work(thread=True, exclusive=True, group="engine", name="read engine",
          description="ask Docker for the current sparkdeck engine", exit_on_error=False)
    def read_engine(self) -> None:
        try:
            reading = self._engine_reader.read()
        except DockerUnavailable as exc:
            message: EngineStateRead | DockerConnectionFailed = DockerConnectionFailed(str(exc))
        else:
            message = EngineStateRead(reading)
        if not get_current_worker().is_cancelled:
            self.post_message(message)

    @work(thread=True, exclusive=True, group="environment", name="check environment",
          description="look for the NVIDIA driver and read unified memory", exit_on_error=False)
    def check_environment(self) -> None:
        gpu = self._gpu_probe()
        try:
            memory, memory_error = self._memory_reader(), None
        except MemInfoError as exc:
            memory, memory_error = None, str(exc)
        if not get_current_worker().is_cancelled:
            self.post_message(EnvironmentChecked(gpu, memory, memory_error))

    def on_worker_state_changed(self, event: Worker.StateChanged) -> None:
        """The one place worker failures end up: a notification naming the error."""
        if event.state == WorkerState.ERROR:
            error = event.worker.error
            self.notify(str(error) or type(error).__name__, title=f"{event.worker.name} failed",
                        severity="error", markup=False)

    # ----- messages to state --------------------------------------------------------------

    def on_catalog_loaded(self, message: CatalogLoaded) -> None:
        self.query_one(PresetTable).show_rows(message.rows)
        self.environment = replace(
            self.environment, preset_count=len(message.catalog.presets),
            problems=tuple(str(problem) for problem in message.catalog.problems))

    def on_engine_state_read(self, message: EngineStateRead) -> None:
        self.engine_report = EngineReport(reading=message.reading)
        self.environment = replace(self.environment, docker_reachable=True, docker_error=None)

    def on_docker_connection_failed(self, message: DockerConnectionFailed) -> None:
        self.engine_report = EngineReport(docker_error=message.error)
        self.environment = replace(self.environment, docker_reachable=False,
                                   docker_error=message.error)

    def on_environment_checked(self, message: EnvironmentChecked) -> None:
        self.environment = replace(self.environment, gpu=message.gpu, memory=message.memory,
                                   memory_error=message.memory_error)


def run_app(catalog_loader: CatalogLoader = load_catalog,
            runtime_factory: RuntimeFactory = DockerRuntime.connect) -> int:
    """Run the control panel in this terminal until the user quits; return the exit status."""
    app = SparkdeckApp(catalog_loader, runtime_factory)
    app.run()
    return app.return_code or 0
