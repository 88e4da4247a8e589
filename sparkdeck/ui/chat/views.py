"""What the chat pane shows: a question, a streaming reply, and the saved-conversations list;
and the feed that hands a streaming reply's pieces from the worker thread to the screen.

A reply is a reasoning block (dimmed, foldable, hidden until reasoning arrives), the answer as
Markdown streamed in with Textual's incremental `Markdown.append` (only the last block is
re-parsed), raw tool calls, and a caption with the figures or the error that ended it.

The pane already gathers fragments between batches (ReplyFeed, below), so each batch is appended
and awaited here, inside the pane's batch update: one frame per batch. Textual's MarkdownStream
(a task of its own doing the same append) was used before; its append landed after the batch,
and with the layout that followed each batch cost two or three frames (measured: 164 frames
for 69 batches at 2,000 tok/s), which kept key presses waiting.
"""

from __future__ import annotations

import re
import threading
from functools import partial
from pathlib import Path

from rich.console import Console
from rich.markdown import Markdown as RichMarkdown
from rich.style import Style
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.content import Content
from textual.geometry import Region, Size
from textual.screen import ModalScreen
from textual.strip import Strip
from textual.widget import Widget
from textual.widgets import Collapsible, Label, Markdown, OptionList, Static
from textual.widgets.option_list import Option
from textual.worker import Worker

from sparkdeck.chat.client import Timed
from sparkdeck.chat.deltas import Content as ContentDelta
from sparkdeck.chat.deltas import Done, Finished, Reasoning, ToolCall
from sparkdeck.chat.export import export_markdown, figures_caption
from sparkdeck.chat.session import ReplyOutcome
from sparkdeck.chat.store import ConversationSummary, Turn, load
from sparkdeck.config import paths
from sparkdeck.text_safety import clean
from sparkdeck.ui.messages import report_worker_failure

# Blank lines (about paragraphs) in the live Markdown before a new segment may start: few,
# since every batch lays out and repaints each block of the live segment.
SEGMENT_BLOCKS = 4
# A line that starts a block of its own: text after at most 3 spaces (4 would be indented
# code, i.e. a continuation), and not a list item (which may belong to the list above).
_STARTS_NEW_BLOCK = re.compile(r" {0,3}(?![-*+] |\d+[.)] |\s)\S")


class UserMessage(Static):
    """One question as the user sent it (shown literally, never as markup)."""

    def __init__(self, text: str) -> None:
        super().__init__(clean(text), markup=False, classes="chat-user")
        self.text = text


# Renders frozen segments off-screen: only its options (width) are used, nothing is printed.
_CONSOLE = Console(color_system="truecolor", force_terminal=True, width=80)


class FrozenMarkdown(Widget):
    """The finished parts of a long reply: each rendered once per width with Rich's Markdown.

    It holds the rendering as ready-made strips and hands out only the lines on screen (the
    line API). A Static holding the text (as before) was turned back into strips, all of
    them, at every repaint of the log, i.e. at every scroll step of a streaming reply; that
    was the largest single cost of the pane at 2,000 tok/s (pyinstrument, ~1 s in 4 s).
    One widget per reply takes every finished part (a widget per part made each layout of
    the log longer as the reply grew), and its height comes from the same rendering, in the
    layout pass itself, so a new part costs no second layout.
    """

    def __init__(self) -> None:
        super().__init__(classes="chat-segment")
        self.parts: list[str] = []
        self._width = 0
        self._strips: list[Strip] = []
        self._line_style: Style | None = None  # set for the duration of one repaint

    @property
    def source(self) -> str:
        return "".join(self.parts)

    def add(self, source: str) -> None:
        """Append a finished part; only it is rendered (at the width already laid out)."""
        self.parts.append(source)
        if self._width:
            self._strips += self._rendered(source, len(self.parts) > 1, self._width)
        self.refresh(layout=True)

    def _rendered(self, source: str, after_another: bool, width: int) -> list[Strip]:
        options = _CONSOLE.options.update_width(width)
        lines = _CONSOLE.render_lines(RichMarkdown(source), options, pad=False)
        # Rich puts one blank line between blocks; parts rendered apart need it added
        gap = [Strip.blank(width)] if after_another and lines else []
        return gap + [Strip(line).crop_extend(0, width, None) for line in lines]

    def _strips_for(self, width: int) -> list[Strip]:
        width = max(20, width)
        if width != self._width:
            self._strips = [
                strip
                for i, part in enumerate(self.parts)
                for strip in self._rendered(part, i > 0, width)
            ]
            self._width = width
        return self._strips

    def get_content_height(self, container: Size, viewport: Size, width: int) -> int:
        return len(self._strips_for(width))

    def render_lines(self, crop: Region) -> list[Strip]:
        # rich_style walks every ancestor's styles: once per repaint, not once per line (it
        # was a third of this widget's cost in each frame of a streaming reply)
        self._line_style = self.rich_style
        return super().render_lines(crop)

    def render_line(self, y: int) -> Strip:
        style = self._line_style or self.rich_style
        strips = self._strips_for(self.content_region.width or self._width)
        if y >= len(strips):
            return Strip.blank(self.content_region.width, style)
        # the widget's own colours under Rich's, as a Static would show them
        return strips[y].apply_style(style)

    @property
    def lines(self) -> list[str]:
        """The rendered lines as plain text (what the reader sees)."""
        return [strip.text.rstrip() for strip in self._strips]


class ReplyView(Vertical):
    """One assistant reply; fed while it streams, then captioned with its figures."""

    def __init__(self) -> None:
        super().__init__(classes="chat-reply")
        self.content_text = ""
        self.reasoning_text = ""
        self.tool_calls: list[str] = []
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
        self.caption.update("waiting for the first token…")

    async def feed(self, content: str, reasoning: str, tool_calls: list[str]) -> None:
        """Append what arrived since the last call (cleaned again here: a conversation saved
        by an older sparkdeck may hold control characters)."""
        content, reasoning = clean(content), clean(reasoning)
        tool_calls = [clean(call) for call in tool_calls]
        if reasoning:
            self.reasoning_text += reasoning
            self.add_class("-has-reasoning")
            await self.query_one(".chat-reasoning", Markdown).append(reasoning)
        if content:
            self.content_text += content
            await self._write_content(content)
        if tool_calls:
            self.tool_calls += tool_calls
            self.add_class("-has-tools")
            self.query_one(".chat-tools", Static).update(
                "tool calls (raw):\n" + "\n".join(self.tool_calls)
            )
        if (content or reasoning) and not self.caption.has_class("-live"):
            self.caption.add_class("-live")
            self.caption.update("streaming… (Esc cancels)")

    async def _write_content(self, text: str) -> None:
        """Feed the live Markdown segment, starting a new segment at a safe blank line.

        Textual lays out every block widget of a Markdown on each refresh, so one long reply
        streamed into one Markdown gets slower with every paragraph (seen: ~1 s behind at
        2,000 tok/s after 200 blocks). Finished segments are rendered once with Rich and
        appended to the reply's one FrozenMarkdown, so the live part stays small whatever the
        length of the reply. A live segment of 4 blocks rather than 12 cut the layout and
        repaint of each batch (2,000 tok/s: key p50 ~70 -> ~50 ms on the same machine).
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
            await self.content.append(text)

    def _segment_cut(self, text: str) -> int | None:
        """Where in `text` a new segment may start: after a blank line, outside code, before
        a line that does not continue the previous block (no indent, no list marker)."""
        if self._live_breaks + text.count("\n\n") < SEGMENT_BLOCKS:
            return None
        at = text.rfind("\n\n")
        while at >= 0:
            cut = at + 2
            fenced = (self._live_fences + text[:cut].count("```")) % 2 == 1
            if (
                not fenced
                and _STARTS_NEW_BLOCK.match(text, cut)
                and self._live_breaks + text[:cut].count("\n\n") >= SEGMENT_BLOCKS
            ):
                return cut
            at = text.rfind("\n\n", 0, at)
        return None

    async def _freeze_live_segment(self, more: str) -> None:
        live = self.content
        frozen = self.query(FrozenMarkdown)
        if frozen:
            frozen.first().add(self._live_source + more)
        else:
            first = FrozenMarkdown()
            first.add(self._live_source + more)
            await self.mount(first, before=live)
        await live.update("")  # the live Markdown starts over after the frozen part
        self._live_source, self._live_breaks, self._live_fences = "", 0, 0
        self.segments += 1

    async def finish(self, outcome: ReplyOutcome | None) -> None:
        """Show how the reply ended."""
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

    BINDINGS = [
        Binding("escape", "dismiss_none", "close", id="conversations-close"),
        Binding("e", "export", "export Markdown", id="conversations-export"),
    ]

    def __init__(self, conversations: list[ConversationSummary]) -> None:
        super().__init__()
        self.conversations = conversations

    def compose(self) -> ComposeResult:
        with Vertical():
            yield Label("Saved conversations — Enter: reopen · e: export Markdown · Esc: close")
            # Content, not a str: a title is the user's first question and may hold [markup]
            options = [
                Option(
                    Content(
                        clean(f"{c.created[:16].replace('T', ' ')}  {c.turns:>3} turns  {c.title}")
                    ),
                    id=c.id,
                )
                for c in self.conversations
            ]
            yield OptionList(*options) if options else Label("(none saved yet)")

    def _selected(self) -> ConversationSummary | None:
        lists = self.query(OptionList)
        highlighted = lists.first().highlighted if lists else None
        return None if highlighted is None else self.conversations[highlighted]

    def on_option_list_option_selected(self, event: OptionList.OptionSelected) -> None:
        chosen = self._selected()
        self.dismiss(chosen.path if chosen else None)

    def action_dismiss_none(self) -> None:
        self.dismiss(None)

    def action_export(self) -> None:
        chosen = self._selected()
        if chosen is not None:
            self.run_worker(
                partial(self._export, chosen.path),
                thread=True,
                name="chat-export",
                group="chat-files",
                exit_on_error=False,
            )

    def _export(self, path: Path) -> None:
        """Write the Markdown next to the data (thread worker: file I/O off the UI thread)."""
        target = paths.data_dir() / "exports" / f"{path.stem}.md"
        paths.atomic_write_text(target, export_markdown(load(path)))
        self.app.call_from_thread(self.notify, f"exported to {target}", title="chat", markup=False)

    def on_worker_state_changed(self, event: Worker.StateChanged) -> None:
        # StateChanged does not bubble: an export that fails must still be reported
        report_worker_failure(self.app, event)


# Seconds between the screen update that showed one batch of a streaming reply and the next
# batch: as long as that batch took to apply and paint (the streaming reply then keeps at
# most about half of the UI thread, the rest answers keys), within these bounds.
MIN_FEED_GAP = 0.008
MAX_FEED_GAP = 0.08


def feed_gap(cost: float) -> float:
    """The pause before the next batch, given what applying and painting the last one cost."""
    return min(MAX_FEED_GAP, max(MIN_FEED_GAP, cost))


class ReplyFeed:
    """Pieces of a reply handed from the worker thread to the UI, drained in batches."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._content: list[str] = []
        self._reasoning: list[str] = []
        self._tools: list[str] = []
        self._woken = False
        self.ending = False  # the server said the reply is complete: show the rest now

    def push(self, timed: Timed) -> bool:
        """Keep a piece; True when the UI must be woken (no wake-up is pending, or the
        reply just ended and what waits must not sit out the pause between batches)."""
        delta = timed.delta
        with self._lock:
            if isinstance(delta, (Finished, Done)):
                # the last words are what a reader waits for; saving the reply (an fsync)
                # still comes before the worker's end message
                wake, self.ending = not self.ending, True
                return wake
            if isinstance(delta, ContentDelta):
                self._content.append(delta.text)
            elif isinstance(delta, Reasoning):
                self._reasoning.append(delta.text)
            elif isinstance(delta, ToolCall):
                self._tools.append(delta.raw)
            else:
                return False
            wake, self._woken = not self._woken, True
            return wake

    def drain(self) -> tuple[str, str, list[str]]:
        with self._lock:
            taken = ("".join(self._content), "".join(self._reasoning), self._tools)
            self._content, self._reasoning, self._tools = [], [], []
            self._woken = False
            return taken
