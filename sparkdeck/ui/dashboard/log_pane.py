"""The log pane: the engine container's log, followed live by a worker of its own."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from textual import work
from textual.message import Message
from textual.widgets import Log
from textual.worker import Worker

from sparkdeck.text_safety import clean
from sparkdeck.ui.worker_failures import report_worker_failure

if TYPE_CHECKING:  # the docker SDK loads with the first Docker call, not with the UI
    from sparkdeck.runtime.client import DockerRuntime
    from sparkdeck.runtime.logs import LogFollower

MAX_LINES = 2000  # a long vLLM start writes a few hundred lines; keep several starts' worth


class LogPane(Log):
    """Shows one container's log at a time; a new container clears it.

    Textual's plain-text Log, not RichLog: the lines are an engine's text, shown as it is,
    and RichLog would load rich.pretty (and attrs) before the first frame (~25 ms)."""

    @dataclass
    class LinesRead(Message, bubble=False):
        """New lines from the engine container's log."""

        container_id: str
        lines: list[str]

    def __init__(self, runtime: Callable[[], DockerRuntime] | None = None,
                 **kwargs: Any) -> None:
        super().__init__(max_lines=MAX_LINES, highlight=False, auto_scroll=True, **kwargs)
        self._runtime = runtime  # None: lines come only through add_lines (tests, tools)
        self._follower: LogFollower | None = None
        self.container_id: str | None = ""  # "" = nothing chosen yet; None = no engine

    def on_mount(self) -> None:
        self.border_title = "log"

    def follow(self, container_id: str | None, name: str = "") -> bool:
        """Start showing `container_id`; True when it is a different container than before.
        With a runtime, its log is followed from now on (the last container's no more)."""
        if container_id == self.container_id:
            return False
        self.container_id = container_id
        self.clear()
        self.border_title = f"log · {name}" if container_id else "log"
        if container_id is None:
            self.write_line("no engine running")
        self._close()
        if container_id is not None and self._runtime is not None:
            from sparkdeck.runtime.logs import LogFollower

            self._follower = LogFollower(self._runtime, container_id)
            self._read_log(self._follower)
        return True

    @work(thread=True, exclusive=True, group="logs", name="follow logs", exit_on_error=False,
          description="follow the engine container's log")
    def _read_log(self, follower: LogFollower) -> None:
        for lines in follower.batches():
            self.post_message(self.LinesRead(follower.container_id, lines))

    def on_log_pane_lines_read(self, message: LinesRead) -> None:
        self.add_lines(message.container_id, message.lines)

    def add_lines(self, container_id: str, lines: list[str]) -> None:
        if container_id == self.container_id:
            # the engine's output: shown, never obeyed
            self.write_lines([clean(line) for line in lines])

    def _close(self) -> None:
        if self._follower is not None:
            self._follower.close()
            self._follower = None

    def on_unmount(self) -> None:
        self._close()

    def on_worker_state_changed(self, event: Worker.StateChanged) -> None:
        report_worker_failure(self.app, event)  # StateChanged does not bubble
