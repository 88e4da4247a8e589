"""The history view: MemAvailable, PSI some/full, GPU power and tok/s from the flight
recording over a window chosen with keys 1-5, as sparklines with their figures and the worst
moments of the window.

The recording is read read-only in a thread worker (sparkdeck.ui.history.figures); a newer
choice of window cancels an older read. A missing or empty recording says how to get one:
the sparkdeck service records (`sparkdeck service start`).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

from textual import work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.message import Message
from textual.screen import Screen
from textual.widgets import Footer, Static
from textual.worker import Worker, get_current_worker

from sparkdeck.host.meminfo import gib
from sparkdeck.recorder.store import RecorderError
from sparkdeck.ui.history.bars import ScaledBars
from sparkdeck.ui.history.figures import SERIES, WINDOWS, HistoryWindow, read_window
from sparkdeck.ui.messages import report_worker_failure

HOW_TO_RECORD = (
    "the flight recorder runs in the sparkdeck service, whether or not a window "
    "is open: start it with `sparkdeck service start` (or `sparkdeck service "
    "install` to have it run at login)"
)


# binding ids of keys 1-5, in the ids' style (letters and dashes: tests/unit/test_ui_keymap.py)
WINDOW_IDS = ("ten-minutes", "hour", "six-hours", "day", "week")


def clock(t: float) -> str:
    return time.strftime("%H:%M:%S", time.localtime(t))


def moments(window: HistoryWindow) -> str:
    """The worst moments of the window, in words."""
    lines = []
    low = window.lowest
    if low is not None and low.mem_available is not None:
        lines.append(
            f"worst: MemAvailable {gib(low.mem_available)} at {clock(low.t)} "
            f"({low.engine_state or 'no engine running'})"
        )
    stall = window.stall
    if stall is not None and stall.psi_full_pct:  # 0 % all along is no moment to name
        lines.append(
            f"most stall: PSI full {stall.psi_full_pct:.1f} % at {clock(stall.t)} "
            f"({stall.engine_state or 'no engine running'})"
        )
    if window.throttled_rows:
        lines.append(
            f"GPU throttled ({', '.join(window.throttle)}) in "
            f"{window.throttled_rows} of {window.rows} readings"
        )
    return "\n".join(lines)


class HistoryScreen(Screen[None]):
    """Full-screen history of the recording; pushed by the app's history key, or by the
    post-mortem dialog with `end` at the last reading of the run that ended uncleanly."""

    BINDINGS = [
        Binding("escape", "back", "Back", id="history-back"),
        *(
            Binding(str(n), f"window('{label}')", label, id=f"history-{name}")
            for n, ((label, _), name) in enumerate(zip(WINDOWS, WINDOW_IDS, strict=False), start=1)
        ),
        Binding("f5", "reload", "Reload", id="history-reload"),
    ]

    @dataclass
    class WindowRead(Message):
        window: HistoryWindow

    @dataclass
    class ReadFailed(Message):
        text: str

    @dataclass
    class ReadAdvanced(Message):
        label: str
        share: float

        def can_replace(self, message: Message) -> bool:
            return isinstance(message, HistoryScreen.ReadAdvanced)

    def __init__(self, path: Path, window: str = "10m", end: float | None = None) -> None:
        super().__init__()
        self.path = path
        self.window_label = window
        self.end = end  # None: up to now, read again at each choice
        self.shown: HistoryWindow | None = None

    def compose(self) -> ComposeResult:
        with VerticalScroll(id="history-body"):
            yield Static("reading the flight recording…", id="history-title", markup=False)
            yield Static("", id="history-worst", markup=False)
            yield Static("", id="history-hint", markup=False)
            for spec in SERIES:
                yield Static(
                    "", id=f"history-{spec.key}-figures", classes="history-figures", markup=False
                )
                yield ScaledBars(spec.worst, id=f"history-{spec.key}-line", classes="history-line")
        yield Footer()

    def on_mount(self) -> None:
        self.query_one("#history-hint").display = False
        self.read()

    def action_back(self) -> None:
        self.dismiss()

    def action_window(self, label: str) -> None:
        self.window_label = label
        self._title(f"reading the {label} window…")
        self.read()

    def action_reload(self) -> None:
        self.read()

    @work(
        thread=True,
        exclusive=True,
        group="history",
        name="read the flight recording",
        description="read a window of the flight recording",
        exit_on_error=False,
    )
    def read(self) -> None:
        worker = get_current_worker()
        end = self.end if self.end is not None else time.time()
        label = self.window_label
        try:
            window = read_window(
                self.path,
                label,
                end,
                cancelled=lambda: worker.is_cancelled,
                progress=lambda share: self.post_message(self.ReadAdvanced(label, share)),
            )
        except RecorderError as exc:
            self.post_message(self.ReadFailed(str(exc)))
            return
        if window is not None and not worker.is_cancelled:
            self.post_message(self.WindowRead(window))

    def on_worker_state_changed(self, event: Worker.StateChanged) -> None:
        report_worker_failure(self.app, event)  # StateChanged does not bubble to the app

    def on_history_screen_read_advanced(self, message: ReadAdvanced) -> None:
        if message.label == self.window_label:  # not an older choice's last words
            self._title(f"reading the {message.label} window… {message.share:.0%}")

    def on_history_screen_read_failed(self, message: ReadFailed) -> None:
        self.shown = None
        self._title(f"history: no recording to show ({self.path})")
        self._hint(f"{message.text}\n\n{HOW_TO_RECORD}")

    def on_history_screen_window_read(self, message: WindowRead) -> None:
        window = self.shown = message.window
        until = "before" if self.end is not None else "up to"
        head = f"history: {window.label} {until} {clock(window.end)} · keys 1-5: window"
        if not window.rows:
            self._title(head)
            self._hint(f"nothing recorded in this window ({self.path}).\n\n{HOW_TO_RECORD}")
            return
        assert window.first_t is not None and window.last_t is not None
        self._title(
            f"{head}\n{window.rows} readings from {clock(window.first_t)} to {clock(window.last_t)}"
        )
        self._hint(None)
        for series in window.series:
            key = series.spec.key
            self.query_one(f"#history-{key}-figures", Static).update(
                f"{series.spec.title}: {series.figures()}"
            )
            line = self.query_one(f"#history-{key}-line", ScaledBars)
            line.values, line.ceiling = series.values, series.ceiling
            line.display = series.latest is not None
        self.query_one("#history-worst", Static).update(moments(window))

    def _title(self, text: str) -> None:
        self.query_one("#history-title", Static).update(text)

    def _hint(self, text: str | None) -> None:
        """Show `text` instead of the lines (None: the lines)."""
        hint = self.query_one("#history-hint", Static)
        hint.display = text is not None
        hint.update(text or "")
        for widget in self.query(".history-figures, .history-line, #history-worst"):
            widget.display = text is None
