"""The chat pane: talk to the running engine, watch the reply stream, keep the conversation.

The pane owns one `ChatSession`. Sending runs `session.ask` in a thread worker; the worker
puts each piece of the reply into a `ReplyFeed` and wakes the pane with one `DeltasReady`
message at a time (never one message per token: at thousands of tokens a second the pane
drains whatever gathered since the last wake-up). Esc closes the HTTP stream so the engine
aborts the request. The log follows new text only while the reader is at the bottom (Textual's
anchor: scrolling up releases it, scrolling back to the end restores it).

Keys: Enter sends; Esc cancels a streaming reply and leaves the input (the dashboard's
one-letter keys work again; Tab or the chat tab's key comes back); ctrl+r folds the last
reply's reasoning, ctrl+t toggles thinking, ctrl+o lists saved conversations, ctrl+n starts
a new one.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from functools import partial
from pathlib import Path

from textual import on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.message import Message
from textual.widgets import Input, Label, Switch
from textual.worker import Worker

from sparkdeck.chat.client import ChatClient, Timed, api_key_from_env
from sparkdeck.chat.session import ChatSession, ChatSettings, ReplyOutcome
from sparkdeck.chat.store import Conversation, list_conversations, load
from sparkdeck.engines import EngineKind
from sparkdeck.ui.chat.views import (
    MAX_FEED_GAP,
    ConversationsScreen,
    ReplyFeed,
    ReplyView,
    UserMessage,
    feed_gap,
)
from sparkdeck.ui.messages import report_worker_failure


class ChatPane(Vertical):
    """Chat with the engine at `base_url` (of `kind`); optionally continue `conversation`."""

    BINDINGS = [
        Binding(
            "escape",
            "cancel",
            "cancel / leave",
            id="chat-cancel",
            tooltip="cancel a streaming reply and leave the input: the dashboard's keys work again",
        ),
        Binding(
            "tab",
            "app.focus_next",
            "next field",
            id="chat-next-field",
            tooltip="move to the next chat field (or out of the chat)",
        ),
        # Short words: all six fit the footer at 80 columns (with "fold reasoning",
        # "thinking" and "conversations" it was cut at "^o conversa"); the tooltips (in the
        # help and the palette) say them in full.
        Binding(
            "ctrl+r",
            "fold_reasoning",
            "fold",
            id="chat-fold",
            tooltip="fold or unfold the last reply's reasoning",
        ),
        Binding(
            "ctrl+t",
            "toggle_thinking",
            "think",
            id="chat-thinking",
            tooltip="ask for thinking, or not (the switch)",
        ),
        Binding(
            "ctrl+o",
            "open_conversations",
            "chats",
            id="chat-open",
            tooltip="list the saved conversations to reopen one",
        ),
        Binding(
            "ctrl+n",
            "new_conversation",
            "new chat",
            id="chat-new",
            tooltip="start a new conversation",
        ),
    ]

    @dataclass
    class DeltasReady(Message, bubble=False):
        """Pieces of the streaming reply are waiting in its feed."""

        view: ReplyView
        feed: ReplyFeed

        def can_replace(self, message: Message) -> bool:
            # one pending wake-up per reply is enough: the drain takes everything
            return isinstance(message, ChatPane.DeltasReady) and message.view is self.view

    @dataclass
    class ReplyEnded(Message, bubble=False):
        """The worker finished a reply (outcome None: it failed with an unexpected error)."""

        view: ReplyView
        feed: ReplyFeed
        outcome: ReplyOutcome | None

    @dataclass
    class ConversationLoaded(Message, bubble=False):
        """A saved conversation was read from disk (or handed in): the pane shows it."""

        conversation: Conversation

    def __init__(
        self,
        base_url: str,
        kind: EngineKind,
        *,
        conversation: Conversation | None = None,
        settings: ChatSettings | None = None,
        save: bool = True,
        id: str | None = "chat-pane",
    ) -> None:
        super().__init__(id=id)
        self.base_url, self.kind, self.save = base_url, kind, save
        self.client = ChatClient(base_url, api_key=api_key_from_env(kind.api_key_env))
        self._initial = conversation
        self._settings = settings or ChatSettings()
        self._thinking_touched = self._settings.thinking is not None
        self.session = self._new_session()
        self.streaming = False
        self._next_feed = 0.0  # monotonic time before which no batch is applied

    # ----- layout ------------------------------------------------------------------------
    def compose(self) -> ComposeResult:
        s = self._settings
        # Each field carries its name in its border, so a narrow side pane never cuts a
        # placeholder down to "te" and "ma"; the numbers get a row of their own.
        system = Input(s.system, placeholder="none", id="chat-system")
        system.border_title = "system prompt"
        yield system
        with Horizontal(id="chat-settings"):
            temperature = Input(
                "" if s.temperature is None else f"{s.temperature:g}",
                placeholder="default",
                type="number",
                id="chat-temperature",
            )
            temperature.border_title = "temperature"
            yield temperature
            max_tokens = Input(
                "" if s.max_tokens is None else str(s.max_tokens),
                placeholder="default",
                type="integer",
                id="chat-max-tokens",
            )
            max_tokens.border_title = "max tokens"
            yield max_tokens
            yield Label("thinking: default", id="chat-thinking-label")
            yield Switch(s.thinking is not False, id="chat-thinking")
        yield VerticalScroll(id="chat-log")
        yield Input(
            placeholder=f"ask {self.kind.title} at {self.base_url} (Enter sends)", id="chat-input"
        )

    def on_mount(self) -> None:
        self.query_one("#chat-log", VerticalScroll).anchor()
        self._show_thinking()
        if self._initial is not None:
            self.post_message(self.ConversationLoaded(self._initial))
        self.query_one("#chat-input", Input).focus()

    def on_unmount(self) -> None:
        self.session.cancel()
        self.session.close()
        self.client.close()

    # ----- settings ----------------------------------------------------------------------
    def _new_session(self) -> ChatSession:
        return ChatSession(self.client, self.kind, self._settings, save=self.save)

    def _read_settings(self) -> ChatSettings | None:
        """The settings inputs as values; None (and a notification) when one is invalid."""
        try:
            temperature_text = self.query_one("#chat-temperature", Input).value.strip()
            max_tokens_text = self.query_one("#chat-max-tokens", Input).value.strip()
            temperature = float(temperature_text) if temperature_text else None
            max_tokens = int(max_tokens_text) if max_tokens_text else None
        except ValueError as exc:
            self.notify(f"chat settings: {exc}", severity="error", markup=False)
            return None
        if max_tokens is not None and max_tokens < 1:
            self.notify("chat settings: max tokens must be at least 1", severity="error")
            return None
        thinking = (
            self.query_one("#chat-thinking", Switch).value if (self._thinking_touched) else None
        )
        return ChatSettings(
            self.query_one("#chat-system", Input).value, temperature, max_tokens, thinking
        )

    @on(Switch.Changed, "#chat-thinking")
    def _thinking_changed(self) -> None:
        self._thinking_touched = True
        self._show_thinking()

    def _show_thinking(self) -> None:
        switch = self.query_one("#chat-thinking", Switch)
        state = ("on" if switch.value else "off") if self._thinking_touched else "default"
        self.query_one("#chat-thinking-label", Label).update(f"thinking: {state}")

    def action_toggle_thinking(self) -> None:
        self.query_one("#chat-thinking", Switch).toggle()

    # ----- sending and streaming ----------------------------------------------------------
    @on(Input.Submitted, "#chat-input")
    async def _submitted(self, event: Input.Submitted) -> None:
        prompt = event.value.strip()
        if not prompt:
            return
        if self.streaming:
            self.notify("a reply is still streaming; Esc cancels it", severity="warning")
            return
        settings = self._read_settings()
        if settings is None:
            return
        event.input.value = ""
        self.session.settings = settings
        log = self.query_one("#chat-log", VerticalScroll)
        view = ReplyView()
        await log.mount_all([UserMessage(prompt), view])
        log.anchor()  # the user just asked: follow the answer again
        self.streaming = True
        feed = ReplyFeed()
        self.run_worker(
            partial(self._reply_worker, prompt, view, feed),
            thread=True,
            name="chat-reply",
            group="chat",
            description=f"chat: {prompt[:40]}",
            exit_on_error=False,
        )

    def _reply_worker(self, prompt: str, view: ReplyView, feed: ReplyFeed) -> None:
        """Thread worker: stream one reply; posts messages, never touches widgets."""
        outcome = None

        def on_delta(timed: Timed) -> None:
            if feed.push(timed):
                self.post_message(self.DeltasReady(view, feed))

        try:
            outcome = self.session.ask(prompt, on_delta=on_delta)
        finally:
            # always end the reply on screen; an unexpected error still reaches the app's
            # worker-failure handler through the worker's ERROR state
            self.post_message(self.ReplyEnded(view, feed, outcome))

    async def on_chat_pane_deltas_ready(self, message: DeltasReady) -> None:
        # Each batch costs a Markdown update, a layout and a repaint of the scrolled log;
        # what arrives meanwhile waits in the feed (no further wake-ups are posted). A fixed
        # pace (25 ms) either left keys waiting behind back-to-back batches on a busy
        # machine or added lag on an idle one; the gap follows the measured cost instead.
        wait = self._next_feed - time.monotonic()
        if wait > 0 and not message.feed.ending:
            self.set_timer(wait, partial(self._drain, message.view, message.feed))
            return
        await self._drain(message.view, message.feed)

    async def _drain(self, view: ReplyView, feed: ReplyFeed) -> None:
        started = time.monotonic()
        self._next_feed = started + MAX_FEED_GAP  # until this batch is on screen
        with self.app.batch_update():  # the whole batch in one frame
            await view.feed(*feed.drain())
        self.call_after_refresh(self._painted, started)

    def _painted(self, started: float) -> None:
        now = time.monotonic()
        self._next_feed = now + feed_gap(now - started)

    async def on_chat_pane_reply_ended(self, message: ReplyEnded) -> None:
        try:
            with self.app.batch_update():
                await message.view.feed(*message.feed.drain())
                await message.view.finish(message.outcome)
        finally:  # a failure showing the end must not leave the pane refusing new questions
            self.streaming = False

    def on_worker_state_changed(self, event: Worker.StateChanged) -> None:
        # StateChanged does not bubble: the pane's own workers (the reply, reading and
        # listing conversations) would otherwise fail without a word
        report_worker_failure(self.app, event)

    def action_cancel(self) -> None:
        """Esc: cancel the streaming reply (the engine aborts it), then give the keys back
        to the dashboard by focusing the conversation log instead of a text field."""
        if self.streaming:
            self.session.cancel()
        self.query_one("#chat-log", VerticalScroll).focus()

    def action_fold_reasoning(self) -> None:
        replies = self.query(ReplyView)
        with_reasoning = [r for r in replies if r.reasoning_text]
        if with_reasoning:
            with_reasoning[-1].toggle_reasoning()

    # ----- conversations ------------------------------------------------------------------
    def action_new_conversation(self) -> None:
        if self.streaming:
            self.notify("a reply is still streaming; Esc cancels it", severity="warning")
            return
        self.session.close()
        self.session = self._new_session()
        self.query_one("#chat-log", VerticalScroll).remove_children()

    def action_open_conversations(self) -> None:
        self.run_worker(
            self._list_worker,
            thread=True,
            name="chat-list",
            group="chat-files",
            exit_on_error=False,
        )

    def _list_worker(self) -> None:
        found = list_conversations()
        self.app.call_from_thread(self.app.push_screen, ConversationsScreen(found), self._chosen)

    def _chosen(self, path: Path | None) -> None:
        if path is None:
            return
        if self.streaming:
            self.notify("a reply is still streaming; Esc cancels it", severity="warning")
            return
        self.run_worker(
            partial(self._load_worker, path),
            thread=True,
            name="chat-load",
            group="chat-files",
            exit_on_error=False,
        )

    def _load_worker(self, path: Path) -> None:
        self.post_message(self.ConversationLoaded(load(path)))

    async def on_chat_pane_conversation_loaded(self, message: ConversationLoaded) -> None:
        conversation = message.conversation
        self.session.close()
        self.session = ChatSession.reopen(
            self.client, self.kind, conversation, self._read_settings() or self._settings
        )
        self.query_one("#chat-system", Input).value = self.session.settings.system
        log = self.query_one("#chat-log", VerticalScroll)
        await log.remove_children()
        for turn in conversation.turns:
            if turn.role == "user":
                await log.mount(UserMessage(turn.content))
            else:
                view = ReplyView()
                await log.mount(view)
                await view.show_saved(turn)
        log.anchor()
        note = (
            f" ({conversation.skipped_lines} unreadable line(s) skipped)"
            if (conversation.skipped_lines)
            else ""
        )
        self.notify(f"reopened {conversation.title}{note}", title="chat", markup=False)
