"""The dashboard's right side: the machine, metrics, chat and guard tabs.

The app binds what they need (the environment report, whether an engine starts, what chat
and metrics talk to, the last launch's timeline) into this widget, which binds it on into each
tab. Opening a tab tells the panes that draw only while shown (the metrics panel, the chat
pane) that they are on screen.

`sparkdeck` imports this module and mounts these tabs right after its first frame
(SparkdeckApp._side_tabs), so nothing here may be needed to draw that frame: the glance strip,
which these tabs feed, is made by the app and handed in.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, NamedTuple

from textual.app import ComposeResult
from textual.reactive import var
from textual.widgets import Static, TabbedContent, TabPane, Tabs

from sparkdeck.config.settings import GuardSettings
from sparkdeck.telemetry.sampler import History, Series, TelemetrySampler, TelemetrySnapshot
from sparkdeck.ui.chat.tab import ChatTab
from sparkdeck.ui.guard.timeline import TimelineChart
from sparkdeck.ui.machine.environment import EnvironmentReport
from sparkdeck.ui.machine.tab import SAMPLE_SECONDS, STARTING_SAMPLE_SECONDS, MachineTab
from sparkdeck.ui.metrics.tab import MetricsTab
from sparkdeck.ui.readers import ChatTarget
from sparkdeck.ui.screen_layout import BlankColumn
from sparkdeck.ui.service_feed import FedTelemetry, ServiceFeed

if TYPE_CHECKING:
    from sparkdeck.guard.timeline import StartupTimeline
    from sparkdeck.presets import Preset
    from sparkdeck.ui.strip.glance import GlanceStrip


class Sampling(NamedTuple):
    """The machine tab's sampler, its history and its two periods (steady, and while an
    engine starts), as the app was handed them; None is the real one or the usual pace.
    Tests replay recordings, faster or never. With a live `feed` the tab draws the
    service's samples instead (sparkdeck.ui.service_feed)."""

    sampler: TelemetrySampler | None = None
    history: History | None = None
    seconds: float | None = None
    starting_seconds: float | None = None
    # the service's telemetry, drawn instead of the sampler's while the service answers
    feed: ServiceFeed | None = None


GUARD_NOTE = (
    "Memory from launch to ready, drawn after each launch (phases from the engine's "
    "log). The line at the bottom is the watchdog of the running engine: it stops "
    "sparkdeck's own engine at the thresholds in settings.toml [guard]."
)


class BlankTabs(TabbedContent):
    """The tab set: draws only its tab bar and the open pane (sparkdeck.ui.screen_layout)."""

    BLANK = True


class BlankTabPane(TabPane):
    """A tab's pane: draws only what it holds (sparkdeck.ui.screen_layout)."""

    BLANK = True


class SideTabs(BlankColumn):
    """The four side tabs (see the module docstring)."""

    environment: var[EnvironmentReport] = var(EnvironmentReport())
    fast_sampling: var[bool] = var(False)  # an engine starts: telemetry at 2 Hz
    chat_target: var[ChatTarget] = var(ChatTarget(None))  # chat and metrics
    timeline: var[StartupTimeline | None] = var(None)  # the last launch's start-up

    def __init__(
        self,
        sampling: Sampling,
        guard: GuardSettings,
        preset: Callable[[str], Preset | None],
        strip: GlanceStrip,
        on_sample: Callable[[], object] = lambda: None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        # Held by reference: workers' messages reach them while a dialog is the screen.
        self.machine_tab = MachineTab(
            FedTelemetry(sampling.sampler or TelemetrySampler(), sampling.feed),
            sampling.history or History(),
            guard,
            (
                sampling.seconds or SAMPLE_SECONDS,
                sampling.starting_seconds or STARTING_SAMPLE_SECONDS,
            ),
            id="machine-body",
        )
        self.metrics_tab = MetricsTab(preset, sampling.feed, id="metrics-body")
        self.chat_tab = ChatTab(id="chat-tab-body")
        self.timeline_chart = TimelineChart(id="timeline-chart")
        # The strip is placed by the app above both columns and draws what these tabs sample.
        self.strip = strip

        def also_show(snapshot: TelemetrySnapshot, history: Mapping[str, Series]) -> None:
            self.strip.telemetry(snapshot, history)
            on_sample()  # in the frame that draws the sample: one frame a second, not two

        self.machine_tab.also_show = also_show
        self.metrics_tab.also_show = self.strip.metrics

    def compose(self) -> ComposeResult:
        with BlankTabs(id="side-tabs"):
            with BlankTabPane("machine", id="machine-tab"):
                yield self.machine_tab.data_bind(
                    fast=SideTabs.fast_sampling, environment=SideTabs.environment
                )
            with BlankTabPane("metrics", id="metrics-tab"):
                yield self.metrics_tab.data_bind(target=SideTabs.chat_target)
            with BlankTabPane("chat", id="chat-tab"):
                yield self.chat_tab.data_bind(target=SideTabs.chat_target)
            with BlankTabPane("guard", id="guard-tab"):
                yield self.timeline_chart.data_bind(timeline=SideTabs.timeline)
                yield Static(GUARD_NOTE, id="guard-note", markup=False)

    def on_mount(self) -> None:
        # Sampling starts once these tabs are on screen and laid out (`sparkdeck` mounts them
        # after its first frame): the sampler's thread never competes with that frame, and
        # the first sample's bars are drawn at the width they have.
        self.call_after_refresh(self.machine_tab.start)

    async def show(self, tab: str) -> None:
        """Open `tab`; the chat pane, mounted now if it waited for its tab, takes the keys.
        Focus left inside the tab being closed goes to the tab bar first: a focused widget
        in a hidden pane makes TabbedContent open that pane again (the key seemed dead)."""
        if not self.is_mounted:
            return  # a key in the moment before the app has mounted these tabs
        tabbed = self.query_one(TabbedContent)
        focused = self.screen.focused
        if focused is not None and tab != tabbed.active and tabbed in focused.ancestors:
            tabbed.query_one(Tabs).focus()
        tabbed.active = tab
        if tab == "chat-tab":
            await self.chat_tab.show(True)
            if (pane := self.chat_tab.pane) is not None:
                pane.query_one("#chat-input").focus()

    async def on_tabbed_content_tab_activated(self, event: TabbedContent.TabActivated) -> None:
        self.metrics_tab.shown = event.pane.id == "metrics-tab"
        chat = event.pane.id == "chat-tab"
        # the screen's class: the stylesheet gives the chat the presets' and the log's room
        # on small terminals (sparkdeck.tcss, `-chat-open`)
        self.screen.set_class(chat, "-chat-open")
        await self.chat_tab.show(chat)
