"""The log pane: the engine container's log, followed live (lines arrive as LogLinesRead)."""

from __future__ import annotations

from textual.widgets import RichLog

MAX_LINES = 2000  # a long vLLM start writes a few hundred lines; keep several starts' worth


class LogPane(RichLog):
    """Shows one container's log at a time; a new container clears it."""

    def __init__(self, **kwargs: str) -> None:
        super().__init__(max_lines=MAX_LINES, wrap=False, markup=False, highlight=False,
                         auto_scroll=True, **kwargs)
        self.container_id: str | None = ""  # "" = nothing chosen yet; None = no engine

    def on_mount(self) -> None:
        self.border_title = "log"

    def follow(self, container_id: str | None, name: str = "") -> bool:
        """Start showing `container_id`; True when it is a different container than before."""
        if container_id == self.container_id:
            return False
        self.container_id = container_id
        self.clear()
        self.border_title = f"log · {name}" if container_id else "log"
        if container_id is None:
            self.write("no engine running")
        return True

    def add_lines(self, container_id: str, lines: list[str]) -> None:
        if container_id == self.container_id:
            for line in lines:
                self.write(line)
