"""A conversation with one engine: history, settings, saving, one streamed reply at a time.

Shared by the chat pane (which runs `ask` in a thread worker) and `sparkdeck chat`. `ask`
blocks until the reply ends; `cancel` may be called from any other thread and makes `ask`
return promptly with what had arrived, marked cancelled. A KeyboardInterrupt (Ctrl-C in
`sparkdeck chat`) also ends the reply as cancelled in the file before it propagates, so the
conversation reloads with the reply "cancelled", not "cut off".
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

from sparkdeck.chat.client import ChatClient, ChatRequest, ChatStream, Timed
from sparkdeck.chat.deltas import Content, Reasoning, ToolCall
from sparkdeck.chat.errors import ChatError
from sparkdeck.chat.reply import ReplyBuilder, ReplyFigures
from sparkdeck.chat.store import Conversation, ConversationWriter
from sparkdeck.engines import EngineKind


@dataclass(frozen=True)
class ChatSettings:
    """What the user chose for the next reply."""

    system: str = ""
    temperature: float | None = None
    max_tokens: int | None = None
    thinking: bool | None = None  # None: leave the engine's and the model's default

    def to_dict(self) -> dict[str, Any]:
        return {
            "temperature": self.temperature,
            "max_tokens": self.max_tokens,
            "thinking": self.thinking,
        }


@dataclass(frozen=True)
class ReplyOutcome:
    """How one reply ended: its text, figures, and the error or cancel that ended it early."""

    text: str
    reasoning: str
    tool_calls: tuple[str, ...]
    figures: ReplyFigures
    model: str
    error: str | None = None
    cancelled: bool = False

    def to_dict(self) -> dict[str, Any]:
        f = self.figures
        return {
            "reply": self.text,
            "reasoning": self.reasoning,
            "tool_calls": list(self.tool_calls),
            "model": self.model,
            "ttft_s": f.ttft_s,
            "client_tps": f.decode_tps,
            "server_tps": f.server_tps,
            "client_tps_note": f.client_note(),
            "completion_tokens": f.completion_tokens,
            "prompt_tokens": f.prompt_tokens,
            "tokens_from": f.tokens_from,
            "finish_reason": f.finish_reason,
            "elapsed_s": f.elapsed_s,
            "error": self.error,
            "cancelled": self.cancelled,
        }


@dataclass
class ChatSession:
    """History and settings of one conversation with the engine behind `client`."""

    client: ChatClient
    kind: EngineKind
    settings: ChatSettings = field(default_factory=ChatSettings)
    save: bool = True
    model: str | None = None
    history: list[dict[str, str]] = field(default_factory=list)
    writer: ConversationWriter | None = None
    _saved_system: str = field(default="", repr=False)  # the system prompt the file holds
    _stream: ChatStream | None = field(default=None, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)
    _idle: threading.Event = field(default_factory=threading.Event, repr=False)
    _cancel_early: bool = field(default=False, repr=False)

    def __post_init__(self) -> None:
        self._idle.set()

    @classmethod
    def reopen(
        cls,
        client: ChatClient,
        kind: EngineKind,
        conversation: Conversation,
        settings: ChatSettings | None = None,
    ) -> ChatSession:
        """Continue a saved conversation: its history is sent, new turns go to its file."""
        settings = settings or ChatSettings()
        if not settings.system and conversation.meta.get("system"):
            settings = replace(settings, system=str(conversation.meta["system"]))
        history = [m for m in conversation.messages() if m["role"] != "system"]
        return cls(
            client,
            kind,
            settings,
            save=True,
            history=history,
            writer=ConversationWriter.reopen(conversation.path),
            _saved_system=str(conversation.meta.get("system") or ""),
        )

    @property
    def conversation_id(self) -> str | None:
        return self.writer.conversation_id if self.writer else None

    def close(self) -> None:
        """Cancel a reply in progress and let it write its end, then close the file.

        The TUI closes a pane (or quits) while its worker may be mid-reply: closing the file
        under that worker would lose the reply's end and reload it as "cut off".
        """
        self.cancel()
        self._idle.wait(timeout=10.0)
        if self.writer is not None:
            self.writer.close()

    def request(self, prompt: str) -> ChatRequest:
        """The request `ask(prompt)` sends: system prompt, history, the new question."""
        system = (
            [{"role": "system", "content": self.settings.system}] if (self.settings.system) else []
        )
        extra = (
            {}
            if self.settings.thinking is None
            else self.kind.thinking_fields(self.settings.thinking)
        )
        return ChatRequest(
            [*system, *self.history, {"role": "user", "content": prompt}],
            model=self.model,
            max_tokens=self.settings.max_tokens,
            temperature=self.settings.temperature,
            extra=extra,
        )

    def cancel(self) -> None:
        """End the reply in progress (from any thread); a no-op when none is."""
        with self._lock:
            stream = self._stream
            self._cancel_early = stream is None and not self._idle.is_set()
        if stream is not None:
            stream.cancel()

    def ask(self, prompt: str, on_delta: Callable[[Timed], None] | None = None) -> ReplyOutcome:
        """Send `prompt`, stream the reply (each delta to `on_delta`), save it, return it."""
        self._cancel_early = False
        self._idle.clear()
        try:
            return self._ask(prompt, on_delta)
        finally:
            self._idle.set()

    def _ask(self, prompt: str, on_delta: Callable[[Timed], None] | None) -> ReplyOutcome:
        sent_at = time.perf_counter()
        builder = ReplyBuilder(sent_at)
        error, cancelled, interrupted = None, False, False
        writer = None
        try:
            if self.model is None:
                self.model = self.client.default_model()
            writer = self._writer()
            if writer is not None:
                if self.settings.system != self._saved_system:
                    writer.system(self.settings.system)
                    self._saved_system = self.settings.system
                writer.user(prompt)
                writer.reply_started(self.model, self.settings.to_dict())
            stream = self.client.stream(self.request(prompt))
            with self._lock:
                self._stream = stream
                if self._cancel_early:  # cancelled before the stream existed
                    stream.cancel()
            with stream:
                for timed in stream:
                    builder.add(timed)
                    self._save_piece(writer, timed)
                    if on_delta is not None:
                        on_delta(timed)
            cancelled = stream.cancelled
        except ChatError as exc:
            error = str(exc)
        except KeyboardInterrupt:
            # the stream's context closed the connection on the way out: the engine stops
            cancelled = interrupted = True
        finally:
            with self._lock:
                self._stream = None
        figures = builder.figures()
        if writer is not None:
            writer.reply_ended(figures.to_dict(), error, cancelled)
        if interrupted:
            raise KeyboardInterrupt
        if builder.text:  # a question without an answer is not sent again: roles alternate
            self.history += [
                {"role": "user", "content": prompt},
                {"role": "assistant", "content": builder.text},
            ]
        return ReplyOutcome(
            builder.text,
            builder.reasoning_text,
            tuple(builder.tool_calls),
            figures,
            self.model or "",
            error,
            cancelled,
        )

    def _writer(self) -> ConversationWriter | None:
        if self.save and self.writer is None:
            self.writer = ConversationWriter.create(
                {
                    "endpoint": self.client.base_url,
                    "kind": self.kind.name,
                    "model": self.model,
                    "system": self.settings.system,
                }
            )
            self._saved_system = self.settings.system
        return self.writer

    @staticmethod
    def _save_piece(writer: ConversationWriter | None, timed: Timed) -> None:
        if writer is None:
            return
        delta = timed.delta
        if isinstance(delta, Content):
            writer.content(delta.text)
        elif isinstance(delta, Reasoning):
            writer.reasoning(delta.text)
        elif isinstance(delta, ToolCall):
            writer.tool_call(delta.raw)
