"""The help screen: every key the app answers to, in a dialog over the main screen."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.content import Content
from textual.screen import ModalScreen
from textual.widgets import Static

HelpRow = tuple[str, str]
"""One line of the help: the key as shown, and what it does."""


def help_content(rows: list[HelpRow]) -> Content:
    """The key table as text, keys in a column of their own."""
    width = max((len(key) for key, _ in rows), default=0) + 2
    return Content("").join(
        Content.assemble((key.ljust(width), "bold $accent"), what, end="\n")
        for key, what in rows
    ).rstrip()


class HelpScreen(ModalScreen[None]):
    """Lists the keys given to it; escape (or the help key again) closes it."""

    BINDINGS = [
        Binding("escape,question_mark,f1", "close", "Close help", key_display="esc",
                id="help.close"),
    ]

    def __init__(self, rows: list[HelpRow]) -> None:
        super().__init__()
        self.rows = rows

    def compose(self) -> ComposeResult:
        with Vertical(id="help-dialog"):
            yield Static("sparkdeck keys", id="help-title")
            yield Static(help_content(self.rows), id="help-keys")
            yield Static("esc, ? or f1 closes this help", id="help-hint")

    def action_close(self) -> None:
        self.dismiss(None)
