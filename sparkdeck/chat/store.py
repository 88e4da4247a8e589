"""Saved conversations: one append-only JSONL file per conversation in the data dir.

A reply is written while it streams (deltas are batched and each batch is flushed and
fsynced at most FLUSH_EVERY_S after its first piece, by a timer when the stream stalls), so a
crash or a power cut loses at most the batch in flight and leaves at most one cut line at the
end, which loading skips. Each batch is appended whole or not at all (sparkdeck.config.paths), so a
full disk leaves no torn line, and a new file appears only with its first line in it.
Nothing is ever rewritten in place: reopening a conversation appends to the same file.

Line types: `meta` (first line: endpoint, kind, model, system prompt), `system` (the system
prompt changed), `user`, `reply_start`
(model and the settings it was asked with), `delta` (content or reasoning text, consecutive
pieces of one kind merged), `tool_call` (raw), `reply_end` (figures, finish reason, error,
cancelled).
"""

from __future__ import annotations

import json
import os
import secrets
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from sparkdeck.config import paths

FLUSH_EVERY_S = 0.25  # longest a streamed piece waits in memory before it is on disk
FLUSH_BYTES = 8192


class ConversationError(Exception):
    """A conversation file cannot be read or written; the message names the file."""


def conversations_dir() -> Path:
    return paths.data_dir() / "conversations"


def _now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S%z")


@dataclass
class Turn:
    """One user message or one assistant reply as it was saved."""

    role: str  # "user" or "assistant"
    content: str = ""
    reasoning: str = ""
    tool_calls: list[str] = field(default_factory=list)
    model: str | None = None
    settings: dict[str, Any] = field(default_factory=dict)
    figures: dict[str, Any] | None = None
    error: str | None = None
    cancelled: bool = False
    complete: bool = True  # False: the reply was cut off (crash) before reply_end


@dataclass
class Conversation:
    """A conversation loaded from its file."""

    id: str
    path: Path
    meta: dict[str, Any]
    turns: list[Turn]
    skipped_lines: int = 0  # undecodable lines (a cut last line after a crash)

    @property
    def title(self) -> str:
        first = next((t.content for t in self.turns if t.role == "user"), "")
        line = first.strip().splitlines()[0] if first.strip() else "(empty)"
        return line if len(line) <= 60 else line[:59] + "…"

    def messages(self) -> list[dict[str, str]]:
        """The history to send with the next question: system prompt, then each turn's text.

        A question whose reply brought no text is left out with it: there is nothing to
        continue from, and many chat templates refuse two user turns in a row.
        """
        found = (
            [{"role": "system", "content": self.meta["system"]}] if self.meta.get("system") else []
        )
        for question, answer in zip(self.turns, self.turns[1:], strict=False):
            if question.role == "user" and answer.role == "assistant" and answer.content:
                found += [
                    {"role": "user", "content": question.content},
                    {"role": "assistant", "content": answer.content},
                ]
        return found


@dataclass(frozen=True)
class ConversationSummary:
    """One row of the conversation list."""

    id: str
    path: Path
    title: str
    created: str
    model: str
    turns: int


def _read_lines(path: Path) -> tuple[list[dict[str, Any]], int]:
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise ConversationError(f"{path}: cannot be read ({exc.strerror or exc})") from exc
    return paths.parse_json_lines(raw)  # a line cut by a crash is skipped, the rest kept


def load(path: Path) -> Conversation:
    """Rebuild a conversation from its file, tolerating a cut last line."""
    records, skipped = _read_lines(path)
    if not records or records[0].get("type") != "meta":
        raise ConversationError(f"{path}: not a sparkdeck conversation (no meta line first)")
    turns: list[Turn] = []
    reply: Turn | None = None
    meta = records[0]
    for record in records[1:]:
        kind = record.get("type")
        if kind == "system":  # the system prompt changed from here on; the last one counts
            meta["system"] = str(record.get("content", ""))
        elif kind == "user":
            reply = None
            turns.append(Turn("user", str(record.get("content", ""))))
        elif kind == "reply_start":
            reply = Turn(
                "assistant",
                model=record.get("model"),
                settings=dict(record.get("settings") or {}),
                complete=False,
            )
            turns.append(reply)
        elif reply is not None and kind == "delta":
            reply.content += str(record.get("content", ""))
            reply.reasoning += str(record.get("reasoning", ""))
        elif reply is not None and kind == "tool_call":
            reply.tool_calls.append(str(record.get("raw", "")))
        elif reply is not None and kind == "reply_end":
            reply.figures = record.get("figures")
            reply.error = record.get("error")
            reply.cancelled = bool(record.get("cancelled"))
            reply.complete = True
            reply = None
    return Conversation(str(meta.get("id", path.stem)), path, meta, turns, skipped)


def list_conversations(directory: Path | None = None) -> list[ConversationSummary]:
    """Saved conversations, newest first; a file that cannot be read is left out."""
    directory = directory or conversations_dir()
    found = []
    for path in directory.glob("*.jsonl"):
        try:
            conversation = load(path)
        except ConversationError:
            continue
        found.append(
            ConversationSummary(
                conversation.id,
                path,
                conversation.title,
                str(conversation.meta.get("created", "")),
                str(conversation.meta.get("model", "")),
                len(conversation.turns),
            )
        )
    return sorted(found, key=lambda s: (s.created, s.id), reverse=True)


def find(conversation_id: str, directory: Path | None = None) -> Path:
    """The file of a conversation id (or a unique prefix of one)."""
    directory = directory or conversations_dir()
    matches = sorted(directory.glob(f"{conversation_id}*.jsonl"))
    if len(matches) != 1:
        what = "no" if not matches else "more than one"
        raise ConversationError(
            f"{what} saved conversation matches {conversation_id!r} in "
            f"{directory} (`sparkdeck conversations` lists them)"
        )
    return matches[0]


class ConversationWriter:
    """Appends one conversation's events to its file, flushed and fsynced in small batches.

    A pending batch is written when the next piece finds it old enough, or by the writer's
    flusher thread when no piece comes (a stalled stream): text on screen is on disk within
    FLUSH_EVERY_S either way. All methods may be called from any thread.
    """

    def __init__(self, path: Path, handle: IO[bytes]):
        self.path = path
        self._handle = handle
        self._pending: list[dict[str, Any]] = []
        self._pending_bytes = 0
        self._oldest: float | None = None
        self._cond = threading.Condition(threading.RLock())
        self._flusher: threading.Thread | None = None
        self._flush_error: ConversationError | None = None

    @classmethod
    def create(cls, meta: Mapping[str, Any], directory: Path | None = None) -> ConversationWriter:
        """A new conversation file, made whole or not at all: its meta line goes to a
        temporary file that is renamed into place once on disk, so a full disk leaves no
        empty or half-written conversation behind (the temporary file is removed)."""
        directory = directory or conversations_dir()
        conversation_id = time.strftime("%Y%m%d-%H%M%S-") + secrets.token_hex(3)
        path = directory / f"{conversation_id}.jsonl"
        line = (
            json.dumps(
                {"type": "meta", "v": 1, "id": conversation_id, "created": _now(), **meta},
                ensure_ascii=False,
            )
            + "\n"
        )
        try:
            paths.atomic_write_text(path, line, paths.PRIVATE_FILE)
        except OSError as exc:
            raise ConversationError(_cannot_write(path, exc)) from exc
        return cls._open(path)

    @classmethod
    def reopen(cls, path: Path) -> ConversationWriter:
        return cls._open(path)  # a cut last line gets its newline with the next append

    @classmethod
    def _open(cls, path: Path) -> ConversationWriter:
        try:
            paths.ensure_dir(path.parent)
            fd = paths.open_for_append(path, paths.PRIVATE_FILE)
        except OSError as exc:
            raise ConversationError(_cannot_write(path, exc)) from exc
        return cls(path, os.fdopen(fd, "r+b", buffering=0))  # unbuffered: whole writes

    @property
    def conversation_id(self) -> str:
        return self.path.stem

    def __enter__(self) -> ConversationWriter:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def close(self) -> None:
        with self._cond:
            if self._handle.closed:
                return
            try:
                self.flush()
            finally:
                self._handle.close()
                self._cond.notify_all()  # the flusher sees the closed handle and ends
        flusher = self._flusher
        if flusher is not None and flusher is not threading.current_thread():
            flusher.join(timeout=5.0)

    def system(self, content: str) -> None:
        self._write([{"type": "system", "at": _now(), "content": content}])

    def user(self, content: str) -> None:
        self._write([{"type": "user", "at": _now(), "content": content}])

    def reply_started(self, model: str, settings: Mapping[str, Any]) -> None:
        self._write(
            [{"type": "reply_start", "at": _now(), "model": model, "settings": dict(settings)}]
        )

    def content(self, text: str) -> None:
        self._queue("content", text)

    def reasoning(self, text: str) -> None:
        self._queue("reasoning", text)

    def tool_call(self, raw: str) -> None:
        with self._cond:
            self._pending.append({"type": "tool_call", "raw": raw})
            self._maybe_flush()

    def reply_ended(
        self, figures: Mapping[str, Any] | None, error: str | None = None, cancelled: bool = False
    ) -> None:
        with self._cond:
            self._pending.append(
                {
                    "type": "reply_end",
                    "at": _now(),
                    "figures": dict(figures) if figures else None,
                    "error": error,
                    "cancelled": cancelled,
                }
            )
            self.flush()

    def _queue(self, key: str, text: str) -> None:
        with self._cond:
            last = self._pending[-1] if self._pending else None
            if last is not None and last.get("type") == "delta" and key in last:
                last[key] += text  # consecutive pieces of one kind become one line
            else:
                self._pending.append({"type": "delta", key: text})
            self._pending_bytes += len(text)
            self._maybe_flush()

    def _maybe_flush(self) -> None:
        now = time.monotonic()
        if self._oldest is None:
            self._oldest = now
            self._start_flusher()
            self._cond.notify_all()  # the flusher's clock starts with this batch
        if now - self._oldest >= FLUSH_EVERY_S or self._pending_bytes >= FLUSH_BYTES:
            self.flush()

    def _start_flusher(self) -> None:
        if self._flusher is None:
            self._flusher = threading.Thread(
                target=self._flush_when_due, daemon=True, name=f"flush {self.path.name}"
            )
            self._flusher.start()

    def _flush_when_due(self) -> None:
        """The flusher thread: writes a batch no later piece came to write (a stall)."""
        with self._cond:
            while not self._handle.closed:
                if self._oldest is None:
                    self._cond.wait()
                    continue
                due = self._oldest + FLUSH_EVERY_S - time.monotonic()
                if due > 0:
                    self._cond.wait(due)
                    continue
                try:
                    self.flush()
                except ConversationError as exc:
                    # reported to the streaming thread with its next write; nothing to retry
                    self._flush_error = exc
                    self._pending, self._pending_bytes, self._oldest = [], 0, None

    def flush(self) -> None:
        """Write what is pending and make it durable."""
        with self._cond:
            if self._pending:
                self._write(self._pending)
            self._pending, self._pending_bytes, self._oldest = [], 0, None

    def _write(self, records: list[dict[str, Any]]) -> None:
        data = b"".join(json.dumps(r, ensure_ascii=False).encode() + b"\n" for r in records)
        with self._cond:
            if self._flush_error is not None:
                error, self._flush_error = self._flush_error, None
                raise error
            try:  # whole lines or nothing: a full disk never leaves half a record
                paths.append_whole(self._handle.fileno(), data)
                os.fsync(self._handle.fileno())
            except OSError as exc:
                raise ConversationError(_cannot_write(self.path, exc)) from exc


def _cannot_write(path: Path, exc: OSError) -> str:
    if paths.disk_full(exc):
        return f"the disk is full: {path} cannot be written ({exc.strerror})"
    return f"{path}: cannot be written ({exc.strerror or exc})"
