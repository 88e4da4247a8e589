"""The post-mortem, shown once: after a start that follows an unclean end (a freeze, a power
cut, a kill -9), the TUI shows the recorder's post-mortem in a dialog, with a key to open the
history view at the end of that run.

"Once" is remembered in the data dir: a small file holding the key of the last post-mortem
dismissed, written atomically (sparkdeck.config.paths.atomic_write_text) so a crash mid-write can
neither lose it nor leave half of it. The key is the post-mortem's file and the start of the
session it judges: the recorder writes one post-mortem per unclean session.
"""

from __future__ import annotations

from pathlib import Path

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.screen import ModalScreen
from textual.widgets import Button, Static

from sparkdeck.config import paths
from sparkdeck.recorder.postmortem import PostMortem
from sparkdeck.recorder.query import last_postmortem
from sparkdeck.recorder.store import RecorderError

SEEN_NAME = "postmortem-seen.txt"


def seen_path() -> Path:
    return paths.data_dir() / SEEN_NAME


def postmortem_key(postmortem: PostMortem, file: str) -> str:
    return f"{postmortem.session_started_at!r} {file}"


def unseen_postmortem(recording: Path) -> tuple[PostMortem, str] | None:
    """The newest post-mortem if the user has not dismissed it yet (blocking: a worker's).
    A missing or unreadable recording has none to show (the history view says why)."""
    try:
        found = last_postmortem(recording)
    except RecorderError:
        return None
    if found is None:
        return None
    try:
        seen = seen_path().read_text(encoding="utf-8").strip()
    except (OSError, UnicodeDecodeError):
        seen = ""
    return None if seen == postmortem_key(*found) else found


def mark_seen(postmortem: PostMortem, file: str) -> None:
    """Remember that this post-mortem was dismissed (blocking: a worker's)."""
    paths.atomic_write_text(seen_path(), postmortem_key(postmortem, file) + "\n")


class PostMortemScreen(ModalScreen[bool]):
    """The post-mortem and its verdict; dismisses with True when the user asks for the
    history at the end of that run."""

    BINDINGS = [
        Binding("h", "close(True)", "History at the end", id="postmortem-history"),
        Binding("escape", "close(False)", "Dismiss", id="postmortem-dismiss"),
        # a modal screen hides the app's bindings: without this the first `q` did nothing
        Binding("q", "app.quit", "Quit", id="postmortem-quit"),
    ]

    def __init__(self, postmortem: PostMortem, file: str) -> None:
        super().__init__()
        self.postmortem = postmortem
        self.file = file

    def compose(self) -> ComposeResult:
        with Vertical(id="postmortem-dialog"):
            yield Static("The last run did not end cleanly", id="postmortem-title")
            yield Static(self.postmortem.text(), id="postmortem-text", markup=False)
            yield Static(
                f"kept in {self.file}; `sparkdeck history --last-crash` shows it again",
                id="postmortem-file",
                markup=False,
            )
            with Horizontal(id="postmortem-buttons"):
                yield Button("History at the end (h)", id="postmortem-history", variant="primary")
                yield Button("Dismiss (esc)", id="postmortem-dismiss")

    def on_button_pressed(self, event: Button.Pressed) -> None:
        self.dismiss(event.button.id == "postmortem-history")

    def action_close(self, history: bool) -> None:
        self.dismiss(history)
