"""The history view and the post-mortem shown once: `HistoryKeeper`, an object the app holds
(composition, not a mixin), so the history key's action and the start-up check live here and
app.py stays wiring.

The check runs after the first frame in a thread worker (it reads SQLite and a file); what
it finds comes back to the app as a message, which the app hands back here; the dialog it
opens marks the post-mortem seen, in a worker too, when it is dismissed.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from textual.message import Message

if TYPE_CHECKING:  # the recorder (SQLite) loads with the check, after the first frame
    from textual.app import App
    from textual.worker import Worker

    from sparkdeck.recorder.postmortem import PostMortem


@dataclass
class PostMortemFound(Message):
    """A post-mortem the user has not dismissed yet is in the recording."""

    postmortem: PostMortem
    file: str


class HistoryKeeper:
    """Opens the history view and runs the once-per-start post-mortem check for `app`."""

    def __init__(self, app: App[Any], recording_path: Path | None = None) -> None:
        self._app = app
        self.recording_path = recording_path  # None: the data dir's (tests point elsewhere)
        self.postmortem_check: Worker[None] | None = None  # the start-up check, once started

    def recording(self) -> Path:
        from sparkdeck.recorder.store import default_path

        return self.recording_path or default_path()

    def open(self, end: float | None = None) -> None:
        """The history view, ending now or at `end` (a post-mortem's last reading)."""
        from sparkdeck.ui.history.view import HistoryScreen

        if not isinstance(self._app.screen, HistoryScreen):
            self._app.push_screen(HistoryScreen(self.recording(), end=end))

    def check_postmortem(self) -> None:
        """Look for an unseen post-mortem, off the UI thread."""
        from sparkdeck.ui.history.postmortem import unseen_postmortem

        app, path = self._app, self.recording()

        def look() -> None:
            found = unseen_postmortem(path)
            if found is not None:
                app.post_message(PostMortemFound(*found))

        self.postmortem_check = app.run_worker(
            look,
            thread=True,
            group="postmortem",
            name="look for a post-mortem",
            description="read the flight recording's last post-mortem",
            exit_on_error=False,
        )

    def show(self, message: PostMortemFound) -> None:
        """Show the post-mortem the check found; dismissed, it is marked seen."""
        from sparkdeck.ui.history.postmortem import PostMortemScreen, mark_seen

        app, postmortem, file = self._app, message.postmortem, message.file

        def closed(history: bool | None) -> None:
            app.run_worker(
                lambda: mark_seen(postmortem, file),
                thread=True,
                group="postmortem",
                name="remember the post-mortem was seen",
                exit_on_error=False,
            )
            if history:  # the end of that run (or now, when nothing was recorded in it)
                self.open(end=postmortem.ended_at)

        app.push_screen(PostMortemScreen(postmortem, file), closed)
