"""Saved conversations: append-only JSONL, durable while streaming, tolerant of a crash."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from sparkdeck.chat import store
from sparkdeck.chat.export import export_markdown
from sparkdeck.chat.store import (
    ConversationError,
    ConversationWriter,
    find,
    list_conversations,
    load,
)
from tests.support.openai_loopback import LoopbackOpenAI, Scripted, chunk_event

FIGURES = {
    "ttft_s": 0.25,
    "decode_tps": 40.0,
    "completion_tokens": 12,
    "prompt_tokens": 9,
    "tokens_from": "usage",
    "server_tps": 41.5,
    "elapsed_s": 0.6,
    "finish_reason": "stop",
}


def _write_one(directory: Path, system: str = "be brief") -> Path:
    with ConversationWriter.create(
        {"endpoint": "http://127.0.0.1:8000", "kind": "vllm", "model": "qwen3", "system": system},
        directory,
    ) as w:
        w.user("What is 2+2?")
        w.reply_started("qwen3", {"temperature": 0.2, "max_tokens": 64, "thinking": True})
        for piece in ("Two", " plus", " two"):
            w.reasoning(piece)
        w.content("4")
        w.content(".")
        w.tool_call('{"index": 0, "function": {"name": "calc"}}')
        w.reply_ended(FIGURES)
        return w.path


def test_round_trip_rebuilds_turns_history_and_settings(tmp_path):
    path = _write_one(tmp_path)
    conversation = load(path)
    assert conversation.id == path.stem and conversation.skipped_lines == 0
    user, reply = conversation.turns
    assert (user.role, user.content) == ("user", "What is 2+2?")
    assert (reply.reasoning, reply.content) == ("Two plus two", "4.")
    assert reply.settings == {"temperature": 0.2, "max_tokens": 64, "thinking": True}
    assert reply.figures == FIGURES and reply.complete and not reply.cancelled
    assert reply.tool_calls == ['{"index": 0, "function": {"name": "calc"}}']
    assert conversation.messages() == [
        {"role": "system", "content": "be brief"},
        {"role": "user", "content": "What is 2+2?"},
        {"role": "assistant", "content": "4."},
    ]
    # consecutive pieces of one kind were merged into one line each
    lines = path.read_text().splitlines()
    assert [json.loads(line)["type"] for line in lines] == [
        "meta",
        "user",
        "reply_start",
        "delta",
        "delta",
        "tool_call",
        "reply_end",
    ]
    assert oct(path.stat().st_mode & 0o777) == "0o600"


def test_a_file_cut_mid_line_still_loads_and_can_be_continued(tmp_path):
    path = _write_one(tmp_path)
    with path.open("ab") as fh:  # what a crash in the middle of a write leaves
        fh.write(b'{"type": "user", "at": "2026-11-30T00:00:00", "content": "Half a li')
    conversation = load(path)
    assert conversation.skipped_lines == 1
    assert [t.content for t in conversation.turns] == ["What is 2+2?", "4."]
    with ConversationWriter.reopen(path) as w:
        w.user("And 3+3?")
        w.reply_started("qwen3", {})
        w.content("6")
        w.reply_ended(None)
    again = load(path)
    assert again.skipped_lines == 1  # the cut bytes are kept as they were, still skipped
    assert [t.content for t in again.turns] == ["What is 2+2?", "4.", "And 3+3?", "6"]


def test_a_reply_cut_off_by_a_crash_keeps_its_text_and_says_so(tmp_path):
    w = ConversationWriter.create({"model": "m"}, tmp_path)
    w.user("tell me")
    w.reply_started("m", {})
    w.content("partial answer")
    w.flush()  # what had reached the disk when the process died
    conversation = load(w.path)
    reply = conversation.turns[-1]
    assert reply.content == "partial answer" and not reply.complete
    assert "cut off" in export_markdown(conversation)


def test_failed_reply_without_text_is_not_sent_again(tmp_path):
    w = ConversationWriter.create({"model": "m"}, tmp_path)
    w.user("first")
    w.reply_started("m", {})
    w.reply_ended(None, error="HTTP 400 from x: bad template")
    w.user("second")
    w.reply_started("m", {})
    w.content("ok")
    w.reply_ended(None)
    w.close()
    assert load(w.path).messages() == [
        {"role": "user", "content": "second"},
        {"role": "assistant", "content": "ok"},
    ]


def test_streamed_pieces_reach_the_disk_within_the_flush_interval(tmp_path):
    w = ConversationWriter.create({"model": "m"}, tmp_path)
    w.user("q")
    w.reply_started("m", {})
    w.content("a")
    assert '"a"' not in w.path.read_text()  # batched, not one fsync per token
    time.sleep(store.FLUSH_EVERY_S + 0.05)
    w.content("b")  # the flush timer or this piece wrote "a"; "b" follows within the interval
    deadline = time.monotonic() + 10 * store.FLUSH_EVERY_S + 2.0
    while load(w.path).turns[-1].content != "ab":
        assert time.monotonic() < deadline
        time.sleep(0.02)
    w.close()


def test_a_killed_chat_process_leaves_a_loadable_conversation(tmp_path, isolated_dirs):
    # A real crash: `sparkdeck chat --save` streaming from a loopback server, killed -9.
    with LoopbackOpenAI() as server:
        server.answer(
            Scripted([chunk_event("tok ")] * 5, pause=0.02, repeat_forever=chunk_event("tok "))
        )
        env = {**os.environ, "SPARKDECK_DATA_DIR": str(isolated_dirs["data"])}
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "sparkdeck",
                "chat",
                "go",
                "--save",
                "--endpoint",
                server.url,
                "--kind",
                "openai",
            ],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
        directory = isolated_dirs["data"] / "conversations"
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            files = list(directory.glob("*.jsonl"))
            if files and '"delta"' in files[0].read_text():
                break
            time.sleep(0.05)
        else:
            proc.kill()
            pytest.fail(f"no streamed text was saved: {proc.stderr.read().decode()}")
        time.sleep(0.3)
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)
    conversation = load(files[0])
    user, reply = conversation.turns
    assert user.content == "go"
    assert reply.content.startswith("tok tok ") and not reply.complete
    assert conversation.meta["endpoint"] == server.url and conversation.meta["kind"] == "openai"


def test_list_find_and_export(tmp_path):
    first = _write_one(tmp_path)
    time.sleep(1.1)  # ids and creation times have one-second resolution
    second = _write_one(tmp_path, system="")
    (tmp_path / "junk.jsonl").write_text("not json\n")
    rows = list_conversations(tmp_path)
    assert [r.path for r in rows] == [second, first]  # newest first; junk left out
    assert rows[0].title == "What is 2+2?" and rows[0].turns == 2 and rows[0].model == "qwen3"
    assert find(first.stem[:-2], tmp_path) == first
    with pytest.raises(ConversationError, match="more than one"):
        find("2", tmp_path)
    with pytest.raises(ConversationError, match="no saved conversation"):
        find("nope", tmp_path)
    markdown = export_markdown(load(first))
    assert markdown.startswith("# What is 2+2?\n")
    assert "**System**\n\nbe brief" in markdown
    assert "<details><summary>Reasoning</summary>\n\nTwo plus two\n\n</details>" in markdown
    assert "**Assistant**" in markdown and "\n4.\n" in markdown
    assert "_TTFT 0.25 s · 40.0 tok/s (server 41.5) · 12 tok_" in markdown


def test_not_a_conversation_names_the_file(tmp_path):
    bad = tmp_path / "x.jsonl"
    bad.write_text('{"type": "user"}\n')
    with pytest.raises(ConversationError, match=str(bad)):
        load(bad)
