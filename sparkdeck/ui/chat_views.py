"""What the chat pane shows: a question, a streaming reply, and the saved-conversations list.

A reply is a reasoning block (dimmed, foldable, hidden until reasoning arrives), the answer as
Markdown fed through Textual's Markdown stream (it coalesces fragments when they come faster
than it can render), raw tool calls, and a caption with the figures or the error that ended it.
"""

from __future__ import annotations

import re
from functools import partial
from pathlib import Path

from rich.console import Console
from rich.markdown import Markdown as RichMarkdown
from rich.text import Text
from textual import events
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import Collapsible, Label, Markdown, OptionList, Static
from textual.widgets.markdown import MarkdownStream
from textual.widgets.option_list import Option

from sparkdeck import paths
from sparkdeck.chat.session import ReplyOutcome
from sparkdeck.chat.store import (
    ConversationSummary,
    Turn,
    export_markdown,
    figures_caption,
    load,
)

# Blank lines (about paragraphs) in the live Markdown before a new segment may start.
SEGMENT_BLOCKS = 12
# A line that starts a block of its own: text after at most 3 spaces (4 would be indented
# code, i.e. a continuation), and not a list item (which may belong to the list above).
_STARTS_NEW_BLOCK = re.compile(r" {0,3}(?![-*+] |\d+[.)] |\s)\S")


class UserMessage(Static):
    """One question as the user sent it (shown literally, never as markup)."""

    DEFAULT_CSS = """
    UserMessage { margin: 1 0 0 0; padding: 0 1; background: $boost; color: $text; }
    """

    def __init__(self, text: str) -> None:
        super().__init__(text, markup=False, classes="chat-user")
        self.text = text


# Renders frozen segments off-screen: only its options (width) are used, nothing is printed.
_CONSOLE = Console(color_system="truecolor", force_terminal=True, width=80)


class FrozenMarkdown(Static):
    """A finished part of a long reply: rendered once per width with Rich's Markdown.

    Holding it as pre-rendered lines keeps layout cheap; a Rich Markdown renderable would be
    parsed and rendered again at every layout of the log.
    """

    def __init__(self, source: str) -> None:
        super().__init__("", classes="chat-segment")
        self.source = source
        self._width = 0

    def on_resize(self, event: events.Resize) -> None:
        width = max(20, event.size.width - self.styles.gutter.width)
        if width != self._width:
            self._width = width
            text = self._rendered(width)
            self.update(text)
            # a fixed height spares every later layout from measuring the whole text again
            self.styles.height = len(text.plain.split("\n")) if text.plain else 0

    def _rendered(self, width: int) -> Text:
        options = _CONSOLE.options.update_width(width)
        lines = _CONSOLE.render_lines(RichMarkdown(self.source), options, pad=False)
        text = Text()
        for i, line in enumerate(lines):
            if i:
                text.append("\n")
            for segment in line:
                text.append(segment.text, segment.style)
        return text


class ReplyView(Vertical):
    """One assistant reply; fed while it streams, then captioned with its figures."""

    DEFAULT_CSS = """
    ReplyView { height: auto; margin: 0 0 1 0; }
    ReplyView Collapsible { display: none; padding: 0; border: none; }
    ReplyView.-has-reasoning Collapsible { display: block; }
    ReplyView .chat-reasoning { color: $text-muted; text-style: italic; }
    ReplyView .chat-reasoning MarkdownParagraph { color: $text-muted; }
    ReplyView .chat-tools { color: $text-warning; display: none; }
    ReplyView.-has-tools .chat-tools { display: block; }
    ReplyView .chat-caption { color: $text-muted; }
    ReplyView FrozenMarkdown { padding: 0 1; text-wrap: nowrap; text-overflow: clip; }
    ReplyView .chat-error { color: $text-error; display: none; }
    ReplyView.-failed .chat-error { display: block; }
    """

    def __init__(self) -> None:
        super().__init__(classes="chat-reply")
        self.content_text = ""
        self.reasoning_text = ""
        self.tool_calls: list[str] = []
        self._streams: list[MarkdownStream] = []
        self._live_source = ""  # the text of the live (last) Markdown segment
        self._live_breaks = 0  # blank lines in it
        self._live_fences = 0  # ``` in it: odd means inside a code block
        self.segments = 1

    def compose(self) -> ComposeResult:
        with Collapsible(title="Reasoning", collapsed=False, classes="chat-reasoning-block"):
            yield Markdown(classes="chat-reasoning")
        yield Markdown(classes="chat-content")
        yield Static("", markup=False, classes="chat-tools")
        yield Static("", markup=False, classes="chat-caption")
        yield Static("", markup=False, classes="chat-error")

    @property
    def reasoning_block(self) -> Collapsible:
        return self.query_one(".chat-reasoning-block", Collapsible)

    @property
    def content(self) -> Markdown:
        return self.query_one(".chat-content", Markdown)

    @property
    def caption(self) -> Static:
        return self.query_one(".chat-caption", Static)

    def on_mount(self) -> None:
        self._reasoning_stream = Markdown.get_stream(self.query_one(".chat-reasoning", Markdown))
        self._content_stream = Markdown.get_stream(self.content)
        self._streams = [self._reasoning_stream, self._content_stream]
        self.caption.update("waiting for the first token…")

    async def feed(self, content: str, reasoning: str, tool_calls: list[str]) -> None:
        """Append what arrived since the last call."""
        if reasoning:
            self.reasoning_text += reasoning
            self.add_class("-has-reasoning")
            await self._reasoning_stream.write(reasoning)
        if content:
            self.content_text += content
            await self._write_content(content)
        if tool_calls:
            self.tool_calls += tool_calls
            self.add_class("-has-tools")
            self.query_one(".chat-tools", Static).update(
                "tool calls (raw):\n" + "\n".join(self.tool_calls))
        if (content or reasoning) and not self.caption.has_class("-live"):
            self.caption.add_class("-live")
            self.caption.update("streaming… (Esc cancels)")

    async def _write_content(self, text: str) -> None:
        """Feed the live Markdown segment, starting a new segment at a safe blank line.

        Textual lays out every block widget of a Markdown on each refresh, so one long reply
        streamed into one Markdown gets slower with every paragraph (seen: ~1 s behind at
        2,000 tok/s after 200 blocks). Finished segments become one static Rich rendering
        each, so the live part stays small whatever the length of the reply.
        """
        cut = self._segment_cut(text)
        if cut is not None:
            # complete blocks go straight into the frozen segment, never through the live
            # Markdown: a big backlog (a slow moment) then costs one Rich render, not a
            # mount of every block
            await self._freeze_live_segment(text[:cut])
            text = text[cut:]
        if text:
            self._live_source += text
            self._live_breaks += text.count("\n\n")
            self._live_fences += text.count("```")
            await self._content_stream.write(text)

    def _segment_cut(self, text: str) -> int | None:
        """Where in `text` a new segment may start: after a blank line, outside code, before
        a line that does not continue the previous block (no indent, no list marker)."""
        if self._live_breaks + text.count("\n\n") < SEGMENT_BLOCKS:
            return None
        at = text.rfind("\n\n")
        while at >= 0:
            cut = at + 2
            fenced = (self._live_fences + text[:cut].count("```")) % 2 == 1
            if (not fenced and _STARTS_NEW_BLOCK.match(text, cut)
                    and self._live_breaks + text[:cut].count("\n\n") >= SEGMENT_BLOCKS):
                return cut
            at = text.rfind("\n\n", 0, at)
        return None

    async def _freeze_live_segment(self, more: str) -> None:
        await self._content_stream.stop()
        live = self.content
        await self.mount(FrozenMarkdown(self._live_source + more), before=live)
        await live.update("")  # the live Markdown starts over after the frozen part
        self._content_stream = Markdown.get_stream(live)
        self._streams = [self._reasoning_stream, self._content_stream]
        self._live_source, self._live_breaks, self._live_fences = "", 0, 0
        self.segments += 1

    async def finish(self, outcome: ReplyOutcome | None) -> None:
        """Stop streaming and show how the reply ended."""
        for stream in self._streams:
            await stream.stop()
        self._streams = []
        if outcome is None:
            self._fail("the reply failed unexpectedly (see the notification)")
            return
        notes = [outcome.figures.summary()]
        if outcome.cancelled:
            notes.insert(0, "cancelled")
        self.caption.update(" · ".join(n for n in notes if n))
        if outcome.error:
            self._fail(outcome.error)

    async def show_saved(self, turn: Turn) -> None:
        """Fill the view from a saved reply (reopening a conversation)."""
        await self.feed(turn.content, turn.reasoning, list(turn.tool_calls))
        for stream in self._streams:
            await stream.stop()
        self._streams = []
        notes = [figures_caption(turn.figures) if turn.figures else ""]
        if turn.cancelled:
            notes.insert(0, "cancelled")
        if not turn.complete:
            notes.append("cut off before it was saved in full")
        self.caption.update(" · ".join(n for n in notes if n))
        if turn.error:
            self._fail(turn.error)

    def _fail(self, message: str) -> None:
        self.add_class("-failed")
        self.query_one(".chat-error", Static).update(message)

    def toggle_reasoning(self) -> None:
        block = self.reasoning_block
        block.collapsed = not block.collapsed


class ConversationsScreen(ModalScreen[Path | None]):
    """Saved conversations, newest first: Enter reopens, e exports to Markdown."""

    DEFAULT_CSS = """
    ConversationsScreen { align: center middle; }
    ConversationsScreen > Vertical { width: 90%; height: 80%; border: round $primary;
                                     background: $surface; padding: 0 1; }
    ConversationsScreen OptionList { height: 1fr; }
    """
    BINDINGS = [
        Binding("escape", "dismiss_none", "close"),
        Binding("e", "export", "export Markdown"),
    ]

    def __init__(self, conversations: list[ConversationSummary]) -> None:
        super().__init__()
        self.conversations = conversations

    def compose(self) -> ComposeResult:
        with Vertical():
            yield Label("Saved conversations — Enter: reopen · e: export Markdown · Esc: close")
            options = [Option(f"{c.created[:16].replace('T', ' ')}  {c.turns:>3} turns  "
                              f"{c.title}", id=c.id) for c in self.conversations]
            yield OptionList(*options) if options else Label("(none saved yet)")

    def _selected(self) -> ConversationSummary | None:
        lists = self.query(OptionList)
        if not lists or lists.first().highlighted is None:
            return None
        return self.conversations[lists.first().highlighted]

    def on_option_list_option_selected(self, event: OptionList.OptionSelected) -> None:
        chosen = self._selected()
        self.dismiss(chosen.path if chosen else None)

    def action_dismiss_none(self) -> None:
        self.dismiss(None)

    def action_export(self) -> None:
        chosen = self._selected()
        if chosen is not None:
            self.run_worker(partial(self._export, chosen.path), thread=True,
                            name="chat-export", group="chat-files", exit_on_error=False)

    def _export(self, path: Path) -> None:
        """Write the Markdown next to the data (thread worker: file I/O off the UI thread)."""
        target = paths.data_dir() / "exports" / f"{path.stem}.md"
        paths.atomic_write_text(target, export_markdown(load(path)), mode=0o644)
        self.app.call_from_thread(self.notify, f"exported to {target}", title="chat")
