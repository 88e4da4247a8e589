"""The side tabs and the benchmark screen: their keys, and what opening one sets going.

A mixin of SparkdeckApp (like LaunchControls), kept apart so app.py stays wiring. Opening a
tab tells the panes that draw only while shown (the metrics panel, the chat pane) that they
are on screen; the benchmark comparison is a screen of its own, loaded when first opened.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from textual.binding import Binding
from textual.widgets import TabbedContent

if TYPE_CHECKING:
    from textual.app import App

    from sparkdeck.ui.chat_tab import ChatTab

    _Base = App[int]
else:
    _Base = object

TAB_BINDINGS = [
    Binding("m", "show_tab('machine-tab')", "Machine", tooltip="Memory, PSI, GPU and "
            "environment tab", id="tab.machine"),
    Binding("e", "show_tab('metrics-tab')", "Metrics", tooltip="The engine's own numbers "
            "tab: tok/s, queue, KV cache, TTFT", id="tab.metrics"),
    Binding("c", "show_tab('chat-tab')", "Chat", tooltip="Chat with the ready engine "
            "(Enter sends)", id="tab.chat"),
    Binding("g", "show_tab('guard-tab')", "Guard", tooltip="Memory guard tab: the last "
            "start-up's memory timeline", id="tab.guard"),
    Binding("b", "benchmarks", "Bench", tooltip="Benchmark comparison of the presets on one "
            "model; b there benchmarks the running engine", id="bench"),
]

GUARD_NOTE = ("Memory from launch to ready, drawn after each launch (phases from the engine's "
              "log). The line at the bottom is the watchdog of the running engine: it stops "
              "sparkdeck's own engine at the thresholds in settings.toml [guard].")


class TabControls(_Base):
    """The tab and benchmark-screen half of SparkdeckApp (see the module docstring)."""

    if TYPE_CHECKING:  # provided by SparkdeckApp and MetricsWiring
        chat_tab: ChatTab

        def show_metrics(self, shown: bool) -> None: ...

    def action_benchmarks(self) -> None:
        from sparkdeck.ui.bench_view import BenchCompareScreen  # httpx, SQLite: when opened

        if not isinstance(self.screen, BenchCompareScreen):
            self.push_screen(BenchCompareScreen())

    async def action_show_tab(self, tab: str) -> None:
        self.query_one(TabbedContent).active = tab
        if tab == "chat-tab":  # the pane mounts now if it waited for the tab (see ChatTab)
            await self.chat_tab.show(True)
            if (pane := self.chat_tab.pane) is not None:
                pane.query_one("#chat-input").focus()

    async def on_tabbed_content_tab_activated(self, event: TabbedContent.TabActivated) -> None:
        self.show_metrics(event.pane.id == "metrics-tab")
        await self.chat_tab.show(event.pane.id == "chat-tab")
