"""The models view: the library (the rows `sparkdeck models` prints) and a pull started from
it, with its progress (bytes, rate, ETA per file and in total) from a thread worker.

The scan and the pull are sparkdeck.models' own (library.scan_library, pull.plan_pull and
pull.pull), so the view and the CLI say the same things. Esc cancels a running pull (its
`cancel` event: huggingface_hub stops at its next chunk and keeps the files already
complete), and closes the view when nothing runs.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from textual import work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.message import Message
from textual.screen import Screen
from textual.widgets import DataTable, Footer, Input, ProgressBar, Static
from textual.worker import Worker

from sparkdeck.models.hub_access import PullError
from sparkdeck.models.library import COLUMNS, Library, row_cells, scan_library
from sparkdeck.models.pull import PullProgress, human_bytes, plan_pull, pull
from sparkdeck.text_safety import clean
from sparkdeck.ui.messages import report_worker_failure
from sparkdeck.ui.tables import fill_table


class ModelsScreen(Screen[None]):
    """Full-screen library with a pull line; pushed by the app's models key."""

    BINDINGS = [
        Binding("escape", "back", "Back / cancel pull", id="models-back"),
        Binding("f5", "rescan", "Rescan", id="models-rescan"),
    ]

    @dataclass
    class LibraryRead(Message):
        library: Library

    @dataclass
    class PullAdvanced(Message):
        progress: PullProgress

        def can_replace(self, message: Message) -> bool:
            # the newest figure replaces one not yet drawn: the view never falls behind
            return isinstance(message, ModelsScreen.PullAdvanced)

    @dataclass
    class PullEnded(Message):
        text: str
        ok: bool

    def __init__(self, preset_models: dict[str, str], gguf_dirs: Sequence[Path] = ()) -> None:
        super().__init__()
        self._preset_models = preset_models
        self._gguf_dirs = tuple(gguf_dirs)
        self._cancel: threading.Event | None = None  # set while a pull runs

    def compose(self) -> ComposeResult:
        yield DataTable(id="models-table", cursor_type="row", zebra_stripes=True)
        yield Input(
            placeholder="model repo to pull, e.g. Qwen/Qwen3-8B, then Enter "
            "(HF_TOKEN from the environment)",
            id="models-pull-input",
        )
        yield ProgressBar(id="models-pull-bar", show_eta=False)
        yield Static("", id="models-pull-status", markup=False)
        yield Footer()

    def on_mount(self) -> None:
        self.query_one(DataTable).border_title = "models on this machine"
        self.query_one(ProgressBar).display = False  # until a pull runs
        self.scan()

    @property
    def pulling(self) -> bool:
        return self._cancel is not None

    # ----- the library ---------------------------------------------------------------------

    @work(
        thread=True,
        exclusive=True,
        group="models-scan",
        name="scan models",
        description="read the Hugging Face cache and GGUF files",
        exit_on_error=False,
    )
    def scan(self) -> None:
        self.post_message(
            self.LibraryRead(
                scan_library(preset_models=self._preset_models, gguf_dirs=self._gguf_dirs)
            )
        )

    def on_models_screen_library_read(self, message: LibraryRead) -> None:
        models = message.library.models
        fill_table(
            self.query_one(DataTable),
            COLUMNS,
            [row_cells(m) for m in models],
            [f"{m.origin}:{m.path}" for m in models],
        )
        if not models:
            self._status(
                "no models in the Hugging Face cache yet: type a repo in the "
                '"model repo to pull" box, then Enter, to pull it'
            )

    def action_rescan(self) -> None:
        self.scan()

    # ----- a pull ---------------------------------------------------------------------------

    def on_input_submitted(self, event: Input.Submitted) -> None:
        repo = event.value.strip()
        if not repo:
            return
        if self.pulling:
            self._status("a pull is running: Esc cancels it")
            return
        self._cancel = threading.Event()
        bar = self.query_one(ProgressBar)
        bar.display = True  # shown only while a pull runs: idle it read "--%"
        bar.update(total=None, progress=0)
        self._status(f"asking the Hub about {repo}…")
        self.pull_repo(repo, self._cancel)

    @work(
        thread=True,
        exclusive=True,
        group="models-pull",
        name="pull model",
        description="download a model repo into the Hugging Face cache",
        exit_on_error=False,
    )
    def pull_repo(self, repo: str, cancel: threading.Event) -> None:
        try:
            plan = plan_pull(repo)
            if plan.needed == 0:
                self.post_message(
                    self.PullEnded(
                        f"{repo} is already in the cache ({human_bytes(plan.total)})", True
                    )
                )
                return
            self.post_message(
                self.PullAdvanced(
                    PullProgress("", 0, 0, plan.total - plan.needed, plan.total, 0.0, None)
                )
            )
            snapshot = pull(plan, lambda p: self.post_message(self.PullAdvanced(p)), cancel)
            self.post_message(self.PullEnded(f"done: {repo} in {snapshot}", True))
        except PullError as exc:
            self.post_message(self.PullEnded(str(exc), False))
        except Exception as exc:  # the view must not stay "pulling"; the failure is shown
            self.post_message(self.PullEnded(f"{type(exc).__name__}: {exc}", False))
            raise

    def on_models_screen_pull_advanced(self, message: PullAdvanced) -> None:
        p = message.progress
        self.query_one(ProgressBar).update(total=max(p.total, 1), progress=p.done)
        if p.file:
            self._status(p.describe())

    def on_models_screen_pull_ended(self, message: PullEnded) -> None:
        self._cancel = None
        self.query_one(ProgressBar).display = False  # the status line says how it ended
        self._status(message.text)
        if message.ok:
            self.scan()

    def action_back(self) -> None:
        if self._cancel is not None:
            self._cancel.set()
            self._status("cancelling the pull (completed files stay in the cache)…")
            return
        self.dismiss(None)

    def _status(self, text: str) -> None:
        self.query_one("#models-pull-status", Static).update(clean(text))

    def on_worker_state_changed(self, event: Worker.StateChanged) -> None:
        report_worker_failure(self.app, event)  # a screen's worker states do not bubble
