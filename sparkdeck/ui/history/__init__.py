"""The history view and the post-mortem shown once, as the app's `HistoryKeys` mixin: the
history key's action and the start-up check live here so app.py stays wiring.

The check runs after the first frame in a thread worker (it reads SQLite and a file); what
it finds comes back to the app as a message, and the dialog it opens marks the post-mortem
seen, in a worker too, when it is dismissed.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from textual.message import Message

from sparkdeck.recorder.postmortem import PostMortem
from sparkdeck.recorder.store import default_path

if TYPE_CHECKING:
    from textual.app import App
    from textual.worker import Worker


@dataclass
class PostMortemFound(Message):
    """A post-mortem the user has not dismissed yet is in the recording."""

    postmortem: PostMortem
    file: str


class HistoryKeys:
    """Mixed into SparkdeckApp (before App): `action_history` and `check_postmortem`."""

    recording_path: Path | None = None  # None: the data dir's (tests may point elsewhere)
    postmortem_check: Worker[None] | None = None  # the start-up check, once started

    def _recording(self) -> Path:
        return self.recording_path or default_path()

    def action_history(self, end: float | None = None) -> None:
        from sparkdeck.ui.history.view import HistoryScreen

        app: App[object] = self  # type: ignore[assignment]
        if not isinstance(app.screen, HistoryScreen):
            app.push_screen(HistoryScreen(self._recording(), end=end))

    def check_postmortem(self) -> None:
        """Look for an unseen post-mortem, off the UI thread."""
        from sparkdeck.ui.history.postmortem import unseen_postmortem

        app: App[object] = self  # type: ignore[assignment]
        path = self._recording()

        def look() -> None:
            found = unseen_postmortem(path)
            if found is not None:
                app.post_message(PostMortemFound(*found))

        self.postmortem_check = app.run_worker(
            look, thread=True, group="postmortem", name="look for a post-mortem",
            description="read the flight recording's last post-mortem", exit_on_error=False)

    def on_post_mortem_found(self, message: PostMortemFound) -> None:
        from sparkdeck.ui.history.postmortem import PostMortemScreen, mark_seen

        app: App[object] = self  # type: ignore[assignment]
        postmortem, file = message.postmortem, message.file

        def closed(history: bool | None) -> None:
            app.run_worker(lambda: mark_seen(postmortem, file), thread=True,
                           group="postmortem", name="remember the post-mortem was seen",
                           exit_on_error=False)
            if history:  # the end of that run (or now, when nothing was recorded in it)
                self.action_history(end=postmortem.ended_at)

        app.push_screen(PostMortemScreen(postmortem, file), closed)
