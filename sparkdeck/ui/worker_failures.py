"""The one path a failed worker takes to the user: a notification naming the error.

`Worker.StateChanged` does not bubble: the app's handler sees only the workers the app
started. A widget or screen that starts workers of its own forwards their state changes
here (ChatPane, ConversationsScreen), and so does the app, so every failure reads the same.
"""

from __future__ import annotations

from typing import Any

from textual.app import App
from textual.worker import Worker, WorkerState

from sparkdeck.text_safety import excerpt


def report_worker_failure(app: App[Any], event: Worker.StateChanged) -> None:
    """Notify when `event` says a worker ended in an error (markup off: the message may
    quote a server or a file, and must be shown as written)."""
    if event.state != WorkerState.ERROR:
        return
    error = event.worker.error
    message = excerpt(str(error), 500) or type(error).__name__
    app.notify(
        message,
        title=f"{event.worker.name or 'a background task'} failed",
        severity="error",
        markup=False,
    )
