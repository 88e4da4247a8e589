"""The benchmark comparison: presets on one model side by side, as a table and bar charts.

`BenchCompareScreen` reads the history (sparkdeck.bench.store) in a thread worker and posts
`HistoryLoaded`; the `BenchComparison` widget only renders what it is given. Rows are
launch fingerprints (preset, image, arguments, version), each with its latest run; columns
are the concurrency levels; `m` switches the figure shown, `[`/`]` the model. `b` runs a
benchmark of the current engine (sparkdeck.bench.session) in a thread worker that posts
`Progressed` and `RunEnded`; `x` stops it, and the stop is on record.

Wiring into the app: push `BenchCompareScreen()` from a binding (e.g. `c`, "Compare"); the
screen's workers belong to the app, so their failures reach its on_worker_state_changed.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical, VerticalScroll
from textual.content import Content
from textual.message import Message
from textual.reactive import reactive
from textual.screen import Screen
from textual.widgets import DataTable, Footer, Static

from sparkdeck.bench.outcome import BenchConfig, BenchProgress
from sparkdeck.bench.session import BenchSession
from sparkdeck.bench.store import BenchStore, StoredPoint, StoredRun
from sparkdeck.text_safety import clean
from sparkdeck.ui.tables import fill_table


@dataclass(frozen=True)
class Metric:
    """One figure a stored point carries, and how to show it."""

    attr: str
    title: str
    unit: str
    scale: float = 1.0
    higher_is_better: bool = True
    digits: int = 1

    def value(self, point: StoredPoint) -> float | None:
        raw = getattr(point, self.attr)
        return None if raw is None else raw * self.scale


METRICS = (
    Metric("total_output_tps", "total output", "tok/s"),
    Metric("decode_tps", "decode per request", "tok/s"),
    Metric("ttft_s", "time to first token", "ms", scale=1000.0, higher_is_better=False),
    Metric("prefill_tps", "prefill per request", "tok/s", digits=0),
)
_BLOCKS = " ▏▎▍▌▋▊▉█"


def bar(value: float, maximum: float, width: int) -> str:
    """A horizontal bar `width` cells long at `maximum`, in eighths of a cell."""
    if maximum <= 0 or value <= 0:
        return ""
    eighths = round(8 * width * min(value, maximum) / maximum)
    full, part = divmod(eighths, 8)
    return "█" * full + (_BLOCKS[part] if part else "")


def levels_of(runs: Sequence[StoredRun]) -> list[int]:
    return sorted({p.concurrency for run in runs for p in run.points})


def values_by_level(run: StoredRun, metric: Metric) -> dict[int, float | None]:
    return {p.concurrency: metric.value(p) for p in run.points}


def describe_progress(p: BenchProgress) -> str:
    if p.phase == "measuring":
        return (
            f"benchmark: concurrency {p.concurrency}, run {(p.repeat or 0) + 1}: "
            f"{p.requests_done}/{p.requests_total} requests  [x] stop"
        )
    return {
        "sizing": "benchmark: sizing the prompt  [x] stop",
        "warmup": "benchmark: warming up  [x] stop",
        "ended": "",
    }.get(p.phase, "benchmark: finishing")


SessionFactory = Callable[[BenchStore, Callable[[BenchProgress], object]], BenchSession]


def default_session(
    store: BenchStore, on_progress: Callable[[BenchProgress], object]
) -> BenchSession:
    """The CLI's defaults against the engine sparkdeck runs (or the one attached)."""
    return BenchSession(BenchConfig(), store=store, on_progress=on_progress)


class BenchComparison(Vertical):
    """Table and bars for the runs it is given; `metric` picks the figure."""

    runs: reactive[tuple[StoredRun, ...]] = reactive((), always_update=True)
    model: reactive[str | None] = reactive(None)
    metric: reactive[int] = reactive(0)

    def compose(self) -> ComposeResult:
        yield Static(id="bench-title")
        yield DataTable(id="bench-table", cursor_type="row", zebra_stripes=True)
        with VerticalScroll():
            yield Static(id="bench-bars")

    def on_mount(self) -> None:
        self.render_all()

    def watch_runs(self) -> None:
        self.render_all()

    def watch_metric(self) -> None:
        self.render_all()

    def render_all(self) -> None:
        if not self.is_mounted:
            return
        metric = METRICS[self.metric]
        better = "higher" if metric.higher_is_better else "lower"
        title = self.query_one("#bench-title", Static)
        if not self.runs:
            title.update(
                "No benchmark runs stored yet: run `sparkdeck bench` against an "
                "engine, then come back."
            )
            self.query_one("#bench-table", DataTable).clear(columns=True)
            self.query_one("#bench-bars", Static).update("")
            return
        # Content, not markup: the model name is the server's and the key hints hold square
        # brackets, both shown as they are (markup showed "[\\[ ]] model")
        title.update(
            Content.assemble(
                clean(self.model or "?"),
                f": {metric.title} ({metric.unit}, {better} is better)  ",
                ("m", "bold"),
                " figure  ",
                ("[ ]", "bold"),
                " model",
            )
        )
        self._fill_table(metric)
        self.query_one("#bench-bars", Static).update(self._bars(metric))

    def _fill_table(self, metric: Metric) -> None:
        levels = levels_of(self.runs)
        rows = []
        for run in self.runs:
            values = values_by_level(run, metric)
            points = {p.concurrency: p for p in run.points}
            cells = [_cell(values.get(lv), points.get(lv), metric.digits) for lv in levels]
            rows.append(
                [
                    run.fingerprint.label,
                    run.fingerprint.engine_version or "?",
                    str(run.id),
                    run.status,
                    *cells,
                ]
            )
        fill_table(
            self.query_one("#bench-table", DataTable),
            ["engine", "version", "run", "status", *(f"c={level}" for level in levels)],
            rows,
            [str(run.id) for run in self.runs],
        )

    def _bars(self, metric: Metric) -> Text:
        text = Text()
        width = max(10, self.size.width - 40)
        # a launch can show twice (its latest run failed, its latest good one beside it)
        labels = [f"{r.fingerprint.label} run {r.id}" for r in self.runs]
        label_width = max(len(label) for label in labels)
        for level in levels_of(self.runs):
            text.append(f"concurrency {level}\n", style="bold")
            values = [
                (label, values_by_level(run, metric).get(level))
                for label, run in zip(labels, self.runs, strict=False)
            ]
            top = max((v for _, v in values if v is not None), default=0.0)
            for run, (label, value) in zip(self.runs, values, strict=False):
                shown = "-" if value is None else f"{value:.{metric.digits}f} {metric.unit}"
                text.append(f"  {label:<{label_width}} ")
                text.append(bar(value or 0.0, top, width), style="bold")
                text.append(f" {shown}\n")
                failed = next((p for p in run.points if p.concurrency == level and p.errors), None)
                if failed is not None:  # the engine's own words: why the figure is missing
                    text.append(
                        f"  {'':<{label_width}} {failed.errors}/{failed.requests} "
                        f"failed: {clean(failed.summary.get('error_message') or '?')}"
                        "\n"
                    )
        return text


def _cell(value: float | None, point: StoredPoint | None, digits: int) -> str:
    """A table cell: the figure, and how many requests failed at that level (a bare "-"
    said nothing about 12 of 12 failing)."""
    shown = "-" if value is None else f"{value:.{digits}f}"
    if point is not None and point.errors:
        shown += f" ({point.errors}/{point.requests} failed)"
    return shown


class BenchCompareScreen(Screen[None]):
    """Full-screen comparison of stored runs; pushed by the app (see the module docstring)."""

    @dataclass
    class HistoryLoaded(Message, bubble=False):
        """The history was read: the models benchmarked, the one shown, its latest runs."""

        models: list[str]
        model: str | None
        runs: list[StoredRun]

        def can_replace(self, message: Message) -> bool:
            return isinstance(message, BenchCompareScreen.HistoryLoaded)  # the newest only

    @dataclass
    class Progressed(Message, bubble=False):
        """A running benchmark moved on; only the newest position matters."""

        progress: BenchProgress

        def can_replace(self, message: Message) -> bool:
            return isinstance(message, BenchCompareScreen.Progressed)

    @dataclass
    class RunEnded(Message, bubble=False):
        """A benchmark ended (complete, stopped or failed) and is stored as `run`."""

        run: StoredRun

    BINDINGS = [
        # short words: all seven fit an 80-column footer; the help shows the tooltips
        Binding("m", "next_metric", "Figure", id="bench-metric", tooltip="The next figure"),
        Binding(
            "right_square_bracket",
            "model(1)",
            "Next",
            id="bench-next-model",
            tooltip="The next model",
        ),
        Binding(
            "left_square_bracket",
            "model(-1)",
            "Prev",
            id="bench-prev-model",
            tooltip="The previous model",
        ),
        Binding("r", "reload", "Reload", id="bench-reload", tooltip="Read the history again"),
        Binding("b", "run_bench", "Run", id="bench-run", tooltip="Benchmark the running engine"),
        Binding("x", "stop_bench", "Stop", id="bench-stop", tooltip="Stop the benchmark"),
        Binding("escape", "close", "Back", id="bench-close"),
    ]

    def __init__(
        self,
        store_factory: Callable[[], BenchStore] = BenchStore,
        model: str | None = None,
        session_factory: SessionFactory = default_session,
    ) -> None:
        super().__init__()
        self._store_factory = store_factory
        self._session_factory = session_factory
        self._model = model
        self._models: list[str] = []
        self._session: BenchSession | None = None

    def compose(self) -> ComposeResult:
        yield Static(id="bench-progress")
        yield BenchComparison(id="bench-comparison")
        yield Footer()

    def on_mount(self) -> None:
        self.load_history(self._model)

    def load_history(self, model: str | None) -> None:
        # The worker belongs to the app, so a failure (an unreadable history file) ends in
        # the app's one on_worker_state_changed handler like every other worker's.
        self.app.run_worker(
            partial(self._read_history, model),
            thread=True,
            exclusive=True,
            group="bench-history",
            exit_on_error=False,
            name="bench-history",
            description="read the benchmark history",
        )

    def _read_history(self, model: str | None) -> None:
        store = self._store_factory()
        models = store.models()
        chosen = model if model in models else (models[0] if models else None)
        runs = store.comparison(chosen) if chosen else []
        self.post_message(self.HistoryLoaded(models, chosen, runs))

    def on_bench_compare_screen_history_loaded(self, message: HistoryLoaded) -> None:
        self._models, self._model = message.models, message.model
        view = self.query_one(BenchComparison)
        view.model = message.model
        view.runs = tuple(message.runs)

    def action_next_metric(self) -> None:
        view = self.query_one(BenchComparison)
        view.metric = (view.metric + 1) % len(METRICS)

    def action_model(self, step: int) -> None:
        if not self._models:
            return
        at = self._models.index(self._model) if self._model in self._models else 0
        self.load_history(self._models[(at + step) % len(self._models)])

    def action_reload(self) -> None:
        self.load_history(self._model)

    def action_run_bench(self) -> None:
        if self._session is not None:
            self.notify("a benchmark is already running", severity="warning")
            return
        session = self._session_factory(
            self._store_factory(), lambda p: self.post_message(self.Progressed(p))
        )
        self._session = session
        self.query_one("#bench-progress", Static).update("benchmark: finding the engine")
        self.app.run_worker(
            partial(self._run_bench, session),
            thread=True,
            exclusive=True,
            group="bench-run",
            exit_on_error=False,
            name="bench-run",
            description="benchmark the running engine",
        )

    def _run_bench(self, session: BenchSession) -> None:
        try:
            self.post_message(self.RunEnded(session.run()))
        finally:
            # also after a failure (reported by the app's worker handler): clear the line
            self._session = None
            self.post_message(self.Progressed(BenchProgress("ended")))

    def on_bench_compare_screen_progressed(self, message: Progressed) -> None:
        self.query_one("#bench-progress", Static).update(describe_progress(message.progress))

    def on_bench_compare_screen_run_ended(self, message: RunEnded) -> None:
        run = message.run
        self.query_one("#bench-progress", Static).update("")
        why = f": {run.reason}" if run.reason else ""
        self.notify(
            f"benchmark run {run.id} {run.status}{why}",
            markup=False,
            severity="information" if run.status == "complete" else "warning",
        )
        self.load_history(run.fingerprint.model)

    def action_stop_bench(self) -> None:
        if self._session is not None:
            self._session.cancel("stopped from the comparison screen")

    def on_unmount(self) -> None:
        self.action_stop_bench()  # leaving the screen never leaves a run going unseen

    def action_close(self) -> None:
        self.dismiss(None)
