"""The bench comparison screen in a tiny host app, and a wait for what it shows."""

from __future__ import annotations

from textual.app import App
from textual.worker import Worker, WorkerState

from sparkdeck.bench.store import BenchStore
from sparkdeck.ui import STYLESHEET
from sparkdeck.ui.bench.view import BenchCompareScreen


class Host(App[None]):
    """Stands in for the sparkdeck app: pushes the screen, collects worker failures."""

    CSS_PATH = STYLESHEET

    def __init__(self, store: BenchStore, session_factory=None) -> None:
        super().__init__()
        self.store = store
        self.session_factory = session_factory
        self.failures: list[str] = []

    def on_mount(self) -> None:
        extra = {"session_factory": self.session_factory} if self.session_factory else {}
        self.push_screen(BenchCompareScreen(lambda: self.store, **extra))

    def on_worker_state_changed(self, event: Worker.StateChanged) -> None:
        if event.state == WorkerState.ERROR:
            self.failures.append(str(event.worker.error))


async def settle(pilot, predicate, tries: int = 100) -> None:
    for _ in range(tries):
        if predicate():
            return
        await pilot.pause(0.05)
    raise AssertionError("the screen never got there")
