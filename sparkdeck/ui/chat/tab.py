"""The chat tab: a ChatPane for the engine to talk to, or a line saying why there is none.

The side tabs bind the app's ChatTarget (sparkdeck's ready engine, else the one attached
engine that answers; see sparkdeck.ui.readers.chat_target) into `target`. The pane is built
only while the tab is shown (`showing`, set when tabs change): a ChatPane focuses its input
when it mounts, which must never take the keys away from the preset table while the user
looks elsewhere, and the chat modules (httpx, SSE) load only when someone opens the tab.
Another engine (a new container, or the attached one) gets a new pane; the old one closes
its stream and HTTP client on unmount.
"""

from __future__ import annotations

from functools import partial
from typing import TYPE_CHECKING, Any

from textual.app import App, ComposeResult
from textual.binding import Binding
from textual.reactive import reactive
from textual.widgets import Static

from sparkdeck.ui.readers import ChatTarget
from sparkdeck.ui.screen_layout import BlankColumn
from sparkdeck.ui.screens.palette import PaletteCommand

if TYPE_CHECKING:
    from sparkdeck.ui.chat.pane import ChatPane


class ChatTab(BlankColumn):
    """Holds the chat pane of the target engine (see the module docstring)."""

    target: reactive[ChatTarget] = reactive(ChatTarget(None))

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.showing = False
        self._pane_for: ChatTarget | None = None  # what the mounted pane talks to

    def compose(self) -> ComposeResult:
        yield Static(self.target.note, id="chat-none", markup=False)

    @property
    def pane(self) -> ChatPane | None:
        from sparkdeck.ui.chat.pane import ChatPane

        panes = self.query(ChatPane)
        return panes.first() if panes else None

    async def watch_target(self) -> None:
        if self.is_mounted:
            self.query_one("#chat-none", Static).update(self.target.note)
        await self.sync()

    async def show(self, showing: bool) -> None:
        """The tab was opened (or left); bring the pane up to date when it is opened."""
        self.showing = showing
        await self.sync()

    async def sync(self) -> None:
        """Mount, replace or remove the pane to match `target` (only while shown)."""
        target = self.target
        wanted = target if target.endpoint is not None else None
        if not self.is_mounted or wanted == self._pane_for or (wanted and not self.showing):
            return
        self._pane_for = wanted
        await self.query("ChatPane").remove()
        self.query_one("#chat-none").display = wanted is None
        if wanted is not None and (endpoint := wanted.endpoint) is not None:
            from sparkdeck.engines import get_kind
            from sparkdeck.ui.chat.pane import ChatPane

            await self.mount(ChatPane(endpoint.url, get_kind(endpoint.kind)))


def chat_commands(app: App) -> list[PaletteCommand]:
    """The chat pane's actions for the command palette; without a pane they say why."""
    from sparkdeck.ui.chat.pane import ChatPane  # loaded when the palette opens

    async def run(action: str) -> None:
        tab = app.chat_tab  # type: ignore[attr-defined]  # the palette is the screen
        pane = tab.pane if tab is not None else None  # the tabs mount after the first frame
        if pane is None:
            app.notify("open the chat tab (c) with an engine ready first", severity="warning")
        else:
            await pane.run_action(action)

    return [
        PaletteCommand(
            f"Chat: {b.description}",
            f"in the chat tab: {b.tooltip or b.description}",
            partial(run, b.action),
        )
        for b in ChatPane.BINDINGS
        if isinstance(b, Binding)
    ]
