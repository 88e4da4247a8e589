"""The connect screen: how to point a client at the service's OpenAI endpoint (a tab), and
the requests it forwarded (another tab).

The text is sparkdeck.endpoint.connect_info's, the same `sparkdeck endpoint` prints; it is
read in a thread worker (the service's socket, the endpoint's /v1/models, the preset files)
on opening and on F5. Each snippet is a read-only TextArea: Tab moves between them, `c`
copies the focused one (the base URL when none is focused) through the terminal's clipboard
(OSC 52, which works over ssh). The API key's value is never in any of it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from rich.table import Table
from rich.text import Text
from textual import work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.message import Message
from textual.screen import Screen
from textual.widgets import Footer, Static, TabbedContent, TabPane, TextArea
from textual.worker import Worker

from sparkdeck.catalog import PresetCatalog, load_catalog
from sparkdeck.config.settings import EndpointSettings
from sparkdeck.endpoint.connect_info import (
    ConnectInfo,
    key_line,
    model_lines,
    models_note,
    read_connect_info,
    service_line,
)
from sparkdeck.text_safety import clean
from sparkdeck.ui.endpoint.requests import RequestsPane
from sparkdeck.ui.messages import report_worker_failure


def summary_rows(info: ConnectInfo) -> list[tuple[str, str]]:
    """The lines above the snippets as (label, text): URL, key, service and endpoint,
    models; text cleaned (a model name is the server's)."""
    rows = [
        ("base URL", info.base_url),
        ("API key", key_line(info)),
        ("status", service_line(info)),
    ]
    if info.endpoint_problem:
        rows.append(("", info.endpoint_problem))
    rows += [("models" if i == 0 else "", line) for i, line in enumerate(model_lines(info))]
    if (note := models_note(info)) is not None:
        rows.append(("", note))
    return [(label, clean(text)) for label, text in rows]


def summary_grid(rows: list[tuple[str, str]]) -> Table:
    """Labels in a column of their own, so a long value wraps under itself at 80 columns."""
    grid = Table.grid(padding=(0, 1))
    grid.add_column(style="bold", no_wrap=True)
    grid.add_column(overflow="fold")
    for label, text in rows:
        grid.add_row(Text(label), Text(text))
    return grid


class ConnectScreen(Screen[None]):
    """Full screen, two tabs: connect (URL, models, snippets) and requests (the log)."""

    BINDINGS = [
        Binding("escape", "back", "Back", id="connect-back"),
        Binding(
            "c",
            "copy",
            "Copy",
            tooltip="Copy the focused snippet (the base URL when none is focused) to the clipboard",
            id="connect-copy",
        ),
        Binding(
            "f5",
            "reload",
            "Reload",
            tooltip="Ask the service and the endpoint again",
            id="connect-reload",
        ),
        Binding("1", "tab('connect-pane')", "Connect", id="connect-tab"),
        Binding("2", "tab('requests-pane')", "Requests", id="connect-requests"),
    ]

    @dataclass
    class InfoRead(Message):
        info: ConnectInfo

    def __init__(
        self,
        settings: EndpointSettings,
        catalog_loader: Callable[[], PresetCatalog] | None = None,
        log_path: Path | None = None,
    ) -> None:
        super().__init__()
        self._settings = settings
        self._catalog_loader = catalog_loader
        self._log_path = log_path
        self.info: ConnectInfo | None = None
        self.summary = ""  # what the summary shows, as plain lines (tests read it)

    def compose(self) -> ComposeResult:
        with TabbedContent(id="connect-tabs"):
            with TabPane("connect", id="connect-pane"):
                with VerticalScroll(id="connect-scroll"):
                    yield Static(
                        "asking the service and the endpoint…", id="connect-summary", markup=False
                    )
            with TabPane("requests", id="requests-pane"):
                yield RequestsPane(self._log_path, id="requests-view")
        yield Footer()

    def on_mount(self) -> None:
        self.read_info()

    @work(
        thread=True,
        exclusive=True,
        group="connect-info",
        name="read the endpoint",
        description="ask the service, the endpoint's /v1/models and the presets",
        exit_on_error=False,
    )
    def read_info(self) -> None:
        from sparkdeck.service.client import service_state

        info = read_connect_info(
            self._settings, self._catalog_loader or load_catalog, service_state=service_state
        )
        self.post_message(self.InfoRead(info))

    async def on_connect_screen_info_read(self, message: InfoRead) -> None:
        self.info = info = message.info
        rows = summary_rows(info)
        self.summary = "\n".join(f"{label:9} {text}" for label, text in rows)
        self.query_one("#connect-summary", Static).update(summary_grid(rows))
        scroll = self.query_one("#connect-scroll", VerticalScroll)
        await scroll.query(".connect-snippet, .connect-snippet-title").remove()
        for index, snippet in enumerate(info.snippets):
            await scroll.mount(
                Static(clean(snippet.title), classes="connect-snippet-title", markup=False)
            )
            await scroll.mount(
                TextArea(
                    snippet.text,
                    read_only=True,
                    soft_wrap=True,
                    show_line_numbers=False,
                    id=f"connect-snippet-{index}",
                    classes="connect-snippet",
                )
            )

    def snippet_texts(self) -> list[str]:
        """What the snippet blocks hold now (tests read it as a user would copy it)."""
        return [area.text for area in self.query(".connect-snippet").results(TextArea)]

    def action_copy(self) -> None:
        focused = self.focused
        if isinstance(focused, TextArea) and focused.has_class("connect-snippet"):
            text, what = focused.selected_text or focused.text, "the snippet"
        elif self.info is not None:
            text, what = self.info.base_url, "the base URL"
        else:
            return
        self.app.copy_to_clipboard(text)
        self.notify(f"copied {what} to the clipboard", timeout=2)

    def action_reload(self) -> None:
        self.query_one("#connect-summary", Static).update("asking again…")
        self.read_info()

    def action_tab(self, pane: str) -> None:
        # focus leaves the old pane first: a focused snippet hidden by the switch would take
        # the focus to its neighbour, and TabbedContent shows the pane that holds the focus
        self.set_focus(None)
        self.query_one(TabbedContent).active = pane
        if pane == "requests-pane":
            self.query_one("#requests-table").focus()

    def action_back(self) -> None:
        self.dismiss(None)

    def on_worker_state_changed(self, event: Worker.StateChanged) -> None:
        report_worker_failure(self.app, event)  # a screen's worker states do not bubble
