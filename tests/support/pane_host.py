"""The test kit's app hosts for Pilot tests (a chat pane; any widgets or screens) and the wait
helper that lets the app run between looks, instead of sleeps."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from textual.app import App, ComposeResult
from textual.pilot import Pilot
from textual.widget import Widget
from textual.worker import Worker, WorkerState

from sparkdeck.engines import get_kind
from sparkdeck.ui import STYLESHEET
from sparkdeck.ui.chat.pane import ChatPane


class WidgetHost(App[None]):
    """Hosts the given widgets (none: a bare app to push screens onto) with sparkdeck's
    stylesheet, or with none (`css_path=None`: a widget's own defaults); keeps what a
    pushed screen dismissed with in `results`."""

    def __init__(self, *widgets: Widget, css_path: Path | str | None = STYLESHEET) -> None:
        super().__init__(css_path=css_path)
        self.widgets = widgets
        self.results: list[Any] = []

    def compose(self) -> ComposeResult:
        yield from self.widgets


class PaneHost(App):
    """Hosts one ChatPane; records worker failures the way the real app handles them."""

    CSS_PATH = STYLESHEET

    def __init__(self, url: str, kind: str = "vllm", **pane_args: Any) -> None:
        super().__init__()
        self.url, self.kind, self.pane_args = url, kind, pane_args
        self.worker_errors: list[BaseException] = []

    def compose(self) -> ComposeResult:
        yield ChatPane(self.url, get_kind(self.kind), **self.pane_args)

    def on_worker_state_changed(self, event: Worker.StateChanged) -> None:
        if event.state == WorkerState.ERROR and event.worker.error is not None:
            self.worker_errors.append(event.worker.error)

    def notify(
        self, message: str, *, title: str = "", severity: str = "information", **kwargs: Any
    ) -> None:
        # The pane's own workers never reach on_worker_state_changed above (StateChanged
        # does not bubble): they report through sparkdeck.ui.messages, i.e. here.
        if severity == "error" and str(title).endswith(" failed"):
            self.worker_errors.append(RuntimeError(f"{title}: {message}"))
        super().notify(message, title=title, severity=severity, **kwargs)  # type: ignore[arg-type]

    @property
    def pane(self) -> ChatPane:
        return self.query_one(ChatPane)


async def wait_until(
    pilot: Pilot,
    predicate: Callable[[], bool],
    timeout: float = 15.0,
    what: str | Callable[[], str] = "condition",
) -> None:
    """Let the app run until predicate() holds; fail after `timeout` seconds (`what`, or
    what it returns then, says what was awaited and what there was instead)."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            said = what() if callable(what) else what
            raise AssertionError(f"timed out after {timeout} s waiting for {said}")
        await pilot.pause(0.02)


async def mounted_chat_pane(pilot: Pilot, app: Any, timeout: float = 10.0) -> ChatPane:
    """The chat tab's pane once it is mounted, with its fields: the tab's query finds a pane
    that is being mounted, before its compose has run (CI run 40: no '#chat-max-tokens' yet
    on a pane just found)."""

    def mounted() -> ChatPane | None:
        pane: ChatPane | None = app.chat_tab.pane
        return pane if pane is not None and pane.is_mounted else None

    await wait_until(pilot, lambda: mounted() is not None, timeout, "the chat pane, mounted")
    pane = mounted()
    assert pane is not None
    return pane
