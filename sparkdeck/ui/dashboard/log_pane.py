"""The log pane: the engine container's log, followed live by a worker of its own."""

from __future__ import annotations

import textwrap
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from textual import work
from textual.message import Message
from textual.widgets import Log
from textual.worker import Worker

from sparkdeck.text_safety import clean
from sparkdeck.ui.messages import report_worker_failure

if TYPE_CHECKING:  # the docker SDK loads with the first Docker call, not with the UI
    from sparkdeck.runtime.client import DockerRuntime
    from sparkdeck.runtime.logs import LogFollower

MAX_LINES = 2000  # a long vLLM start writes a few hundred lines; keep several starts' worth
CONTINUATION = "  "  # starts the rest of a wrapped line, so one line reads as one


def wrapped(lines: Iterable[str], width: int | None) -> list[str]:
    """`lines` cut to `width` cells (None: as they are). An engine's figures come at the
    end of its lines (`... 406.50 tokens per second`): cut at the pane's edge, as Log does,
    they were lost at 80 columns."""
    if not width or width <= len(CONTINUATION) + 1:
        return list(lines)
    out: list[str] = []
    for line in lines:
        if len(line) <= width:
            out.append(line)
        else:
            out += textwrap.wrap(
                line, width, subsequent_indent=CONTINUATION, break_on_hyphens=False
            ) or [""]
    return out


class LogPane(Log):
    """Shows one container's log at a time; a new container clears it. Long lines wrap at
    the pane's width, again when it changes.

    Textual's plain-text Log, not RichLog: the lines are an engine's text, shown as it is,
    and RichLog would load rich.pretty (and attrs) before the first frame (~25 ms)."""

    @dataclass
    class LinesRead(Message, bubble=False):
        """New lines from the engine container's log."""

        container_id: str
        lines: list[str]

    def __init__(self, runtime: Callable[[], DockerRuntime] | None = None, **kwargs: Any) -> None:
        super().__init__(max_lines=MAX_LINES, highlight=False, auto_scroll=True, **kwargs)
        self._runtime = runtime  # None: lines come only through add_lines (tests, tools)
        self._follower: LogFollower | None = None
        self.container_id: str | None = ""  # "" = nothing chosen yet; None = no engine
        self._raw: deque[str] = deque(maxlen=MAX_LINES)  # as read, to wrap again on resize
        self._wrapped_to: int | None = None  # the width the shown lines were wrapped to

    def on_mount(self) -> None:
        self.border_title = "log"

    def follow(self, container_id: str | None, name: str = "") -> bool:
        """Start showing `container_id`; True when it is a different container than before.
        With a runtime, its log is followed from now on (the last container's no more)."""
        if container_id == self.container_id:
            return False
        self.container_id = container_id
        self.clear()
        self._raw.clear()
        self.border_title = f"log · {name}" if container_id else "log"
        if container_id is None:
            self._write(["no engine running"])
        self._close()
        if container_id is not None and self._runtime is not None:
            from sparkdeck.runtime.logs import LogFollower

            self._follower = LogFollower(self._runtime, container_id)
            self._read_log(self._follower)
        return True

    @work(
        thread=True,
        exclusive=True,
        group="logs",
        name="follow logs",
        exit_on_error=False,
        description="follow the engine container's log",
    )
    def _read_log(self, follower: LogFollower) -> None:
        for lines in follower.batches():
            self.post_message(self.LinesRead(follower.container_id, lines))

    def on_log_pane_lines_read(self, message: LinesRead) -> None:
        self.add_lines(message.container_id, message.lines)

    def add_lines(self, container_id: str, lines: list[str]) -> None:
        if container_id == self.container_id:
            # the engine's output: shown, never obeyed
            self._write([clean(line) for line in lines])

    def _write(self, lines: list[str]) -> None:
        self._raw.extend(lines)
        self.write_lines(wrapped(lines, self._room()))

    def _room(self) -> int | None:
        """The room for text (None before the first layout: lines are kept whole until
        the first resize wraps them)."""
        self._wrapped_to = self.scrollable_content_region.width or None
        return self._wrapped_to

    def on_resize(self) -> None:
        if self._raw and self.scrollable_content_region.width != self._wrapped_to:
            at_end = self.is_vertical_scroll_end
            self.clear()
            self.write_lines(wrapped(self._raw, self._room()), scroll_end=False)
            if at_end:  # the newest lines stay in view, as they were
                self.scroll_end(animate=False, immediate=True, x_axis=False)

    def _close(self) -> None:
        if self._follower is not None:
            self._follower.close()
            self._follower = None

    def on_unmount(self) -> None:
        self._close()

    def on_worker_state_changed(self, event: Worker.StateChanged) -> None:
        report_worker_failure(self.app, event)  # StateChanged does not bubble
