"""The chat pane in a tiny host app, driven with Pilot against a real loopback HTTP server."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from textual.containers import VerticalScroll
from textual.widgets import Input, Label

from sparkdeck.chat.client import Timed
from sparkdeck.chat.deltas import Content, Done, Finished
from sparkdeck.chat.store import ConversationWriter, load
from sparkdeck.engines import get_kind
from sparkdeck.ui.chat.views import (
    MAX_FEED_GAP,
    MIN_FEED_GAP,
    ConversationsScreen,
    FrozenMarkdown,
    ReplyFeed,
    ReplyView,
    UserMessage,
    feed_gap,
)
from tests.support.chat_pane_pilot import SIZE, send_message
from tests.support.openai_loopback import LoopbackOpenAI, Scripted, chunk_event, sse_events
from tests.support.pane_host import PaneHost, wait_until

SSE = Path(__file__).parents[1] / "fixtures" / "sse"


@pytest.fixture
def server():
    with LoopbackOpenAI(models=("qwen3",)) as running:
        yield running


def _recorded(name: str) -> Scripted:
    return Scripted(sse_events((SSE / name).read_text(encoding="utf-8")))


async def _finished(pilot) -> None:
    await wait_until(pilot, lambda: not pilot.app.pane.streaming, what="reply to end")


@pytest.mark.anyio
async def test_send_streams_reasoning_and_answer_and_saves_them(server, isolated_dirs):
    server.answer(_recorded("vllm_new_reasoning.sse"))
    app = PaneHost(server.url)
    async with app.run_test(size=SIZE) as pilot:
        view = await send_message(pilot, "hello")
        await _finished(pilot)
        assert view.content_text == "Hello!" and view.content.source == "Hello!"
        assert view.reasoning_text == "The user greets me." and view.has_class("-has-reasoning")
        caption = str(view.caption.render())
        assert "TTFT" in caption and "4 tok" in caption
        assert [m.text for m in app.query(UserMessage)] == ["hello"]
        assert app.query_one("#chat-input", Input).value == ""
        session_id = app.pane.session.conversation_id
    assert not app.worker_errors
    (saved,) = (isolated_dirs["data"] / "conversations").glob("*.jsonl")
    assert saved.stem == session_id
    user, reply = load(saved).turns
    assert (user.content, reply.content, reply.reasoning) == (
        "hello",
        "Hello!",
        "The user greets me.",
    )


@pytest.mark.anyio
async def test_escape_cancels_and_the_server_sees_the_client_leave(server):
    server.answer(
        Scripted([chunk_event("word ")] * 3, pause=0.05, repeat_forever=chunk_event("word "))
    )
    app = PaneHost(server.url)
    async with app.run_test(size=SIZE) as pilot:
        view = await send_message(pilot, "go on forever")
        await wait_until(pilot, lambda: view.content_text.count("word") >= 3, what="tokens")
        await pilot.press("escape")
        await _finished(pilot)
        assert str(view.caption.render()).startswith("cancelled")
        assert server.disconnected.wait(5)
        # the pane takes the next question
        server.answer(_recorded("vllm_old_reasoning_content.sse"))
        second = await send_message(pilot, "2+2?")
        await _finished(pilot)
        assert second.content_text == "4"
    sent = [server.next_request()["body"] for _ in range(2)][1]
    # the cancelled reply's text is part of the history it continues from
    assert sent["messages"][0] == {"role": "user", "content": "go on forever"}
    assert sent["messages"][1]["role"] == "assistant"
    assert sent["messages"][1]["content"].startswith("word word word")


@pytest.mark.anyio
async def test_fold_reasoning_with_ctrl_r(server):
    server.answer(_recorded("sglang_reasoning_content.sse"))
    app = PaneHost(server.url, kind="sglang")
    async with app.run_test(size=SIZE) as pilot:
        view = await send_message(pilot, "hi")
        await _finished(pilot)
        assert view.reasoning_text == "Okay, the user says hi."
        assert view.reasoning_block.collapsed is False
        await pilot.press("ctrl+r")
        assert view.reasoning_block.collapsed is True
        await pilot.press("ctrl+r")
        assert view.reasoning_block.collapsed is False


@pytest.mark.anyio
async def test_thinking_switch_is_sent_only_once_touched_and_mapped_per_kind(server):
    app = PaneHost(server.url, kind="vllm")
    async with app.run_test(size=SIZE) as pilot:
        label = app.query_one("#chat-thinking-label", Label)
        assert str(label.render()) == "thinking: default"
        server.answer(_recorded("vllm_new_reasoning.sse"))
        await send_message(pilot, "one")
        await _finished(pilot)
        await pilot.press("ctrl+t")
        assert str(label.render()) == "thinking: off"
        server.answer(_recorded("vllm_new_reasoning.sse"))
        await send_message(pilot, "two")
        await _finished(pilot)
    first, second = server.next_request()["body"], server.next_request()["body"]
    assert "chat_template_kwargs" not in first and "reasoning_effort" not in first
    for key, value in get_kind("vllm").thinking_fields(False).items():
        assert second[key] == value


@pytest.mark.anyio
async def test_settings_inputs_shape_the_request(server):
    server.answer(_recorded("vllm_new_reasoning.sse"))
    app = PaneHost(server.url)
    async with app.run_test(size=SIZE) as pilot:
        app.query_one("#chat-system", Input).value = "answer in French"
        app.query_one("#chat-temperature", Input).value = "0.3"
        app.query_one("#chat-max-tokens", Input).value = "64"
        await send_message(pilot, "hello")
        await _finished(pilot)
    body = server.next_request()["body"]
    assert body["messages"][0] == {"role": "system", "content": "answer in French"}
    assert body["temperature"] == 0.3 and body["max_tokens"] == 64


@pytest.mark.anyio
async def test_http_error_is_shown_in_the_conversation(server):
    server.answer(
        Scripted(
            [
                json.dumps(
                    {"error": {"message": "chat template error: roles must alternate", "code": 400}}
                ).encode()
            ],
            status=400,
            content_type="application/json",
        )
    )
    app = PaneHost(server.url)
    async with app.run_test(size=SIZE) as pilot:
        view = await send_message(pilot, "hi")
        await _finished(pilot)
        assert view.has_class("-failed")
        error = str(view.query_one(".chat-error").render())
        assert "HTTP 400" in error and "roles must alternate" in error
    assert not app.worker_errors


@pytest.mark.anyio
async def test_auto_scroll_only_while_the_reader_is_at_the_bottom(server):
    server.answer(
        Scripted(
            [chunk_event(f"line {i}\n\n") for i in range(60)],
            pause=0.01,
            repeat_forever=chunk_event("more\n\n"),
        )
    )
    app = PaneHost(server.url)
    async with app.run_test(size=SIZE) as pilot:
        log = app.query_one("#chat-log", VerticalScroll)
        view = await send_message(pilot, "long")
        await wait_until(pilot, lambda: log.max_scroll_y > 20, what="overflow")
        await wait_until(pilot, lambda: log.scroll_y >= log.max_scroll_y - 1, what="following")
        log.scroll_home(animate=False)  # the reader scrolls up to read
        await pilot.pause(0.3)
        grown = log.max_scroll_y
        await wait_until(pilot, lambda: log.max_scroll_y > grown + 5, what="more text")
        assert log.scroll_y < 5  # left where the reader put it
        log.scroll_end(animate=False)  # back at the bottom: follows again
        await pilot.pause(0.3)
        grown = log.max_scroll_y
        await wait_until(pilot, lambda: log.max_scroll_y > grown + 5, what="more text")
        await wait_until(pilot, lambda: log.scroll_y >= log.max_scroll_y - 2, what="follow")
        await pilot.press("escape")
        await _finished(pilot)
        assert view.content_text.startswith("line 0")


@pytest.mark.anyio
async def test_reopen_a_saved_conversation_and_continue_it(server, isolated_dirs):
    with ConversationWriter.create(
        {"endpoint": server.url, "kind": "vllm", "model": "qwen3", "system": "be brief"}
    ) as w:
        w.user("What is 2+2?")
        w.reply_started("qwen3", {})
        w.reasoning("Simple sum.")
        w.content("**4**")
        w.reply_ended(
            {
                "ttft_s": 0.1,
                "decode_tps": 20.0,
                "completion_tokens": 5,
                "prompt_tokens": 3,
                "tokens_from": "usage",
                "server_tps": None,
                "elapsed_s": 0.3,
                "finish_reason": "stop",
            }
        )
        path = w.path
    with path.open("ab") as fh:
        fh.write(b'{"type": "user", "content": "cut')  # a crash left half a line
    server.answer(_recorded("vllm_new_reasoning.sse"))
    app = PaneHost(server.url)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("ctrl+o")
        await wait_until(
            pilot, lambda: isinstance(app.screen, ConversationsScreen), what="conversation list"
        )
        await pilot.press("enter")
        await wait_until(pilot, lambda: len(app.query(ReplyView)) == 1, what="reopened reply")
        (old,) = app.query(ReplyView)
        assert old.content_text == "**4**" and old.reasoning_text == "Simple sum."
        assert "TTFT 0.10 s" in str(old.caption.render())
        assert app.query_one("#chat-system", Input).value == "be brief"
        await send_message(pilot, "And 3+3?")
        await _finished(pilot)
    body = server.next_request()["body"]
    assert body["messages"] == [
        {"role": "system", "content": "be brief"},
        {"role": "user", "content": "What is 2+2?"},
        {"role": "assistant", "content": "**4**"},
        {"role": "user", "content": "And 3+3?"},
    ]
    turns = load(path).turns
    assert [t.content for t in turns] == ["What is 2+2?", "**4**", "And 3+3?", "Hello!"]


@pytest.mark.anyio
async def test_export_from_the_list_writes_markdown(server, isolated_dirs):
    with ConversationWriter.create({"model": "m"}) as w:
        w.user("export me")
        w.reply_started("m", {})
        w.content("done")
        w.reply_ended(None)
    app = PaneHost(server.url)
    target = isolated_dirs["data"] / "exports" / f"{w.path.stem}.md"
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("ctrl+o")
        await wait_until(
            pilot, lambda: isinstance(app.screen, ConversationsScreen), what="conversation list"
        )
        await pilot.press("e")
        await wait_until(pilot, target.exists, what="export")
    assert target.read_text().startswith("# export me\n")


@pytest.mark.anyio
async def test_a_long_reply_streams_in_segments_and_keeps_all_its_text(server):
    # 40 paragraphs with formatting: finished parts are frozen (rendered once), the rest
    # stays live Markdown; nothing is lost or reordered on the way.
    paragraphs = [f"Paragraph {i} has **bold** and `code`." for i in range(40)]
    server.answer(Scripted([chunk_event(p + "\n\n") for p in paragraphs], pause=0.005))
    app = PaneHost(server.url)
    async with app.run_test(size=SIZE) as pilot:
        view = await send_message(pilot, "long")
        await _finished(pilot)
        await pilot.pause(0.2)
        frozen = list(view.query(FrozenMarkdown))
        assert len(frozen) == 1  # one widget takes every finished part: layout stays small
        first = frozen[0]
        assert view.segments == len(first.parts) + 1 >= 3
        shown = first.source + view.content.source
        assert shown == view.content_text == "".join(p + "\n\n" for p in paragraphs)
        lines = first.lines
        assert lines[0].startswith("Paragraph 0 has bold and code.")  # Markdown, rendered
        assert "Paragraph 1 has bold and code." in lines  # one block a line, not one string
        # parts are rendered apart yet read as one text: every paragraph once, in order,
        # a blank line between paragraphs also where one part ends and the next begins
        said = [line for line in lines if line.startswith("Paragraph")]
        assert said == [f"Paragraph {i} has bold and code." for i in range(len(said))]
        assert len(lines) == 2 * len(said) - 1
        assert first.size.height == len(lines)  # laid out at the rendering's height
        assert max(len(line) for line in lines) <= SIZE[0]
        # what the screen shows of it comes from the same lines (the line API)
        assert first.render_line(0).text.rstrip() == lines[0]


def test_feed_gap_follows_the_cost_of_the_last_batch_within_bounds():
    assert feed_gap(0.0) == MIN_FEED_GAP  # an idle machine still leaves the loop a moment
    assert feed_gap(0.03) == 0.03  # a 30 ms batch waits 30 ms: keys get half the loop
    assert feed_gap(5.0) == MAX_FEED_GAP  # a stall never makes the reply wait seconds


@pytest.mark.anyio
async def test_a_fast_stream_is_applied_in_batches_and_nothing_is_lost(server, monkeypatch):
    # 400 pieces as fast as the server can write them: the pane must batch them (not one
    # Markdown update per token) yet keep updating while it streams (not only at the end)
    pieces = [f"w{i} " + ("\n\n" if i % 25 == 24 else "") for i in range(400)]
    server.answer(Scripted([chunk_event(p) for p in pieces], pause=0.002))
    batches: list[str] = []
    original = ReplyView.feed

    async def counted(view, content, reasoning, tool_calls):
        batches.append(content)
        await original(view, content, reasoning, tool_calls)

    monkeypatch.setattr(ReplyView, "feed", counted)
    app = PaneHost(server.url)
    async with app.run_test(size=SIZE) as pilot:
        view = await send_message(pilot, "fast")
        await _finished(pilot)
    assert "".join(batches) == view.content_text == "".join(pieces)
    assert 3 <= len([b for b in batches if b]) < len(pieces) // 4


def test_the_end_of_a_reply_wakes_the_pane_even_while_a_batch_waits():
    # the last words must not sit out the pause between batches: finish_reason / [DONE]
    # wake the pane although a wake-up is already pending, and only once
    feed = ReplyFeed()
    assert feed.push(Timed(0.0, Content("Hello"))) is True
    assert feed.push(Timed(0.0, Content(" world"))) is False  # a wake-up is pending
    assert not feed.ending
    assert feed.push(Timed(0.0, Finished("stop"))) is True
    assert feed.ending
    assert feed.push(Timed(0.0, Done())) is False
    assert feed.drain() == ("Hello world", "", [])
