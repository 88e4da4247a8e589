"""The dashboard's two dialogs over the main screen: the confirmation before a launch, switch
or stop (what will be stopped, what is claimed), and help (every key the app answers to).
Loaded with the first of them, not for the first frame."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace

from textual.app import App, ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.content import Content
from textual.screen import ModalScreen
from textual.widgets import Button, Static


class ConfirmScreen(ModalScreen[bool]):
    """Asks yes or no about the steps listed; dismisses with True only on an explicit yes."""

    BINDINGS = [
        Binding("y", "answer(True)", "Yes", id="confirm-yes"),
        Binding("n,escape", "answer(False)", "No", key_display="n / esc", id="confirm-no"),
    ]

    def __init__(self, title: str, lines: list[str], yes_label: str = "Yes") -> None:
        super().__init__()
        self.title_text = title
        self.lines = lines
        self.yes_label = yes_label

    def compose(self) -> ComposeResult:
        with Vertical(id="confirm-dialog"):
            yield Static(self.title_text, id="confirm-title")
            yield Static(
                Content("\n").join(Content(f"• {line}") for line in self.lines), id="confirm-steps"
            )
            with Horizontal(id="confirm-buttons"):
                yield Button(f"{self.yes_label} (y)", id="confirm-yes", variant="primary")
                yield Button("Cancel (n)", id="confirm-no")

    def on_button_pressed(self, event: Button.Pressed) -> None:
        self.dismiss(event.button.id == "confirm-yes")

    def action_answer(self, yes: bool) -> None:
        self.dismiss(yes)


HelpRow = tuple[str, str]
"""One line of the help: the key as shown, and what it does."""


def key_rows(
    app: App,
    bindings: Sequence[BindingType],
    where: str = "",
    keymap: Mapping[str, str] | None = None,
) -> list[HelpRow]:
    """One line per binding, with the key the user's keymap gives it (settings.toml
    [keys]); `where` names the pane or dialog the keys work in."""
    rows: list[HelpRow] = []
    keymap = keymap or {}
    for binding in bindings:
        assert isinstance(binding, Binding)
        key_string = keymap.get(binding.id or "", binding.key)
        keys = [
            app.get_key_display(replace(binding, key=key.strip(), key_display=None))
            for key in key_string.split(",")
        ]
        what = (
            f"{binding.description}: {binding.tooltip}" if binding.tooltip else binding.description
        )
        rows.append((" / ".join(keys), f"{where}: {what}" if where else what))
    return rows


def pane_rows(app: App, keymap: Mapping[str, str] | None = None) -> list[HelpRow]:
    """The keys of the chat pane, the memory guard's dialogs, the benchmark screen and the
    history view, each saying where."""
    from sparkdeck.ui.bench.view import BenchCompareScreen  # loaded when the help opens
    from sparkdeck.ui.chat.pane import ChatPane
    from sparkdeck.ui.endpoint.view import ConnectScreen
    from sparkdeck.ui.guard.screens import FitModal, SwitchWaitScreen
    from sparkdeck.ui.history.view import HistoryScreen

    return [
        ("enter", "in chat: send the message"),
        *key_rows(app, ChatPane.BINDINGS, "in chat", keymap),
        ("tab", "in the fit dialog: Launch anyway / Cancel (the default)"),
        *key_rows(app, FitModal.BINDINGS, "in the fit dialog", keymap),
        *key_rows(app, SwitchWaitScreen.BINDINGS, "waiting for memory (press twice)", keymap),
        *key_rows(app, BenchCompareScreen.BINDINGS, "in the benchmark screen", keymap),
        *key_rows(app, ConnectScreen.BINDINGS, "in the connect screen", keymap),
        *key_rows(app, HistoryScreen.BINDINGS, "in the history view", keymap),
    ]


def binding_rows(
    app: App, bindings: Sequence[BindingType], keymap: Mapping[str, str] | None = None
) -> list[HelpRow]:
    """One line per key: the app's bindings, then keys that widgets and Textual add."""
    rows = key_rows(app, bindings, keymap=keymap)
    rows += [
        ("enter", "on a preset: launch it (or switch to it), after a confirmation"),
        ("↑ / ↓", "move through the presets"),
        ("← / →", "scroll the table sideways"),
        ("PgUp / PgDn", "a page up or down"),
        ("^home / ^end", "first / last preset"),
        ("tab", "move between the table, the log and the side tabs"),
        ("^p", "command palette: every action and theme by name"),
        ("y / n", "answer a launch, switch or stop confirmation"),
        ("^q", "quit, from any screen"),
        ("esc", "close this help"),
    ]
    return rows


def help_content(rows: list[HelpRow]) -> Content:
    """The key table as text, keys in a column of their own."""
    width = max((len(key) for key, _ in rows), default=0) + 2
    return (
        Content("")
        .join(
            Content.assemble((key.ljust(width), "bold $accent"), what, end="\n")
            for key, what in rows
        )
        .rstrip()
    )


class HelpScreen(ModalScreen[None]):
    """Lists the keys given to it; escape (or the help key again) closes it."""

    BINDINGS = [
        Binding(
            "escape,question_mark,f1", "close", "Close help", key_display="esc", id="help-close"
        ),
    ]

    def __init__(self, rows: list[HelpRow]) -> None:
        super().__init__()
        self.rows = rows

    def compose(self) -> ComposeResult:
        with VerticalScroll(id="help-dialog"):  # scrolls on a short terminal
            yield Static("sparkdeck keys", id="help-title")
            yield Static(help_content(self.rows), id="help-keys")
            yield Static("esc, ? or f1 closes this help", id="help-hint")

    def action_close(self) -> None:
        self.dismiss(None)


def open_help(app: App, bindings: Sequence[BindingType], keymap: Mapping[str, str]) -> None:
    """Show the help over the current screen (once: not over itself)."""
    if not isinstance(app.screen, HelpScreen):
        app.push_screen(HelpScreen(binding_rows(app, bindings, keymap) + pane_rows(app, keymap)))
