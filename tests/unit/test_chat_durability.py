"""A reply on screen is on disk, and a cancelled reply reloads as cancelled (issue 12, item 11).

A real `sparkdeck chat` process against a real loopback server whose stream stalls after a
few words (it keeps the connection alive with SSE comments, as a busy engine does): the text
must reach the conversation file within a second although no further token comes; Ctrl-C
(SIGINT) must end the reply with `reply_end` marked cancelled; and a chat pane closed
mid-reply (the TUI quitting) must do the same.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from sparkdeck.chat.client import ChatClient
from sparkdeck.chat.session import ChatSession
from sparkdeck.chat.store import (
    FLUSH_EVERY_S,
    ConversationWriter,
    conversations_dir,
    list_conversations,
    load,
)
from sparkdeck.engines import get_kind
from tests.support.openai_loopback import LoopbackOpenAI, Scripted, chunk_event

ROOT = Path(__file__).resolve().parents[2]


def _stalling() -> Scripted:
    # two words, then only keep-alive comments: no token ever comes again
    return Scripted(
        [chunk_event("Hello"), chunk_event(" world")],
        pause=0.2,
        repeat_forever=b": still thinking\n\n",
    )


@pytest.fixture
def server():
    with LoopbackOpenAI(models=("stall-model",)) as running:
        yield running


class _Reader:
    """Collects a process's stdout bytes on a thread (the reply has no newline yet)."""

    def __init__(self, proc: subprocess.Popen[bytes]):
        self.data = b""
        self._proc = proc
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self._proc.stdout is not None
        while chunk := os.read(self._proc.stdout.fileno(), 4096):
            self.data += chunk

    def wait_for(self, text: bytes, timeout: float = 60.0) -> None:
        deadline = time.monotonic() + timeout
        while text not in self.data:
            assert time.monotonic() < deadline, f"never printed {text!r}: {self.data!r}"
            assert self._proc.poll() is None, f"exited early: {self.data!r}"
            time.sleep(0.02)


def _chat(server: LoopbackOpenAI) -> tuple[subprocess.Popen[bytes], _Reader]:
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "sparkdeck",
            "chat",
            "say hello",
            "--save",
            "--endpoint",
            server.url,
            "--kind",
            "llamacpp",
        ],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
    )
    return proc, _Reader(proc)


def _only_conversation():
    found = list_conversations()
    assert len(found) == 1, found
    return load(found[0].path)


def test_text_of_a_stalled_stream_is_on_disk_before_the_kill(server):
    server.answer(_stalling())
    proc, out = _chat(server)
    try:
        out.wait_for(b"Hello world")
        # on screen now; give the flush timer its period (and a busy machine some slack)
        deadline = time.monotonic() + 10 * FLUSH_EVERY_S + 2.0
        while time.monotonic() < deadline:
            reply = _only_conversation().turns[-1]
            if reply.content == "Hello world":
                break
            time.sleep(0.05)
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    reply = _only_conversation().turns[-1]
    assert reply.content == "Hello world"
    assert not reply.complete  # killed: no reply_end, reloads as "cut off", text intact


def test_ctrl_c_ends_the_reply_as_cancelled(server):
    server.answer(_stalling())
    proc, out = _chat(server)
    out.wait_for(b"Hello world")
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode != 0
    assert b"cancelled" in err and b"Traceback" not in err
    conversation = _only_conversation()
    reply = conversation.turns[-1]
    assert (reply.role, reply.content) == ("assistant", "Hello world")
    assert reply.complete and reply.cancelled and reply.error is None
    assert server.disconnected.wait(10)  # and the engine saw the client go


def test_closing_a_session_mid_reply_ends_the_reply_as_cancelled(server):
    """What the chat pane does when the TUI quits or the pane goes while a reply streams."""
    server.answer(_stalling())
    client = ChatClient(server.url)
    session = ChatSession(client, get_kind("llamacpp"))
    seen = threading.Event()
    outcome: list[object] = []
    worker = threading.Thread(
        target=lambda: outcome.append(session.ask("say hello", on_delta=lambda t: seen.set())),
        daemon=True,
    )
    worker.start()
    try:
        assert seen.wait(30)
        time.sleep(0.5)  # " world" too
        session.close()  # the pane's on_unmount, on the UI thread
        worker.join(timeout=30)
        assert not worker.is_alive()
    finally:
        session.cancel()
        client.close()
    reply = _only_conversation().turns[-1]
    assert reply.complete and reply.cancelled
    assert reply.content == "Hello world"


def test_writer_flushes_a_pending_piece_without_a_next_one(tmp_path):
    """The timer alone: one piece, no more, and it is on disk within the flush period."""
    with ConversationWriter.create({"model": "m"}, tmp_path) as writer:
        writer.reply_started("m", {})
        writer.content("lonely piece")
        deadline = time.monotonic() + 10 * FLUSH_EVERY_S + 2.0
        while b"lonely piece" not in writer.path.read_bytes():
            assert time.monotonic() < deadline, "the pending piece never reached the disk"
            time.sleep(0.02)
        assert load(writer.path).turns[-1].content == "lonely piece"
    flusher = writer._flusher  # the timer's thread ends with the writer
    assert flusher is not None and not flusher.is_alive()
    assert conversations_dir() != tmp_path  # written where it was told, not the data dir
