"""What reaches the terminal (issue 12, items 5 and 6): a model's or a server's control bytes
are shown, never obeyed, on every path (CLI chat, saved conversation export, error messages,
the chat pane), and a failing worker in the chat pane reaches the user as a notification.

The CLI runs as a real subprocess (`python -m sparkdeck ...`) against a real loopback HTTP
server, with its own config and data dirs, so what is checked is the bytes a terminal gets.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from textual.widgets import Input, OptionList

from sparkdeck.text_safety import clean, excerpt
from sparkdeck.ui.chat.views import ConversationsScreen, ReplyView
from tests.support.openai_loopback import LoopbackOpenAI, Scripted, chunk_event
from tests.support.pane_host import PaneHost, wait_until

# ESC sequences that clear the screen and retitle the terminal, BEL, NUL, a C1 CSI, DEL, a
# lone CR (which would let text overwrite its own line) and a CRLF (harmless: becomes LF).
HOSTILE = [
    "Hello \x1b[2J\x1b[H",
    "\x1b]0;pwned\x07 there\x00",
    " \x9b31m red\x7f",
    " over\rwrite\r\nnext\tline",
]
# Bytes a terminal obeys: C0 except TAB and LF, DEL, and C1 as UTF-8 (0xC2 0x80-0x9F).
_OBEYED = re.compile(rb"[\x00-\x08\x0b-\x1f\x7f]|\xc2[\x80-\x9f]")


def _hostile_reply() -> Scripted:
    usage = {
        "object": "chat.completion.chunk",
        "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 3, "completion_tokens": 4, "total_tokens": 7},
    }
    return Scripted(
        [
            *(chunk_event(piece) for piece in HOSTILE),
            f"data: {json.dumps(usage)}\n\n".encode(),
            b"data: [DONE]\n\n",
        ]
    )


def _sparkdeck(args: list[str], dirs: dict[str, Path]) -> subprocess.CompletedProcess[bytes]:
    env = {
        **os.environ,
        "SPARKDECK_CONFIG_DIR": str(dirs["config"]),
        "SPARKDECK_DATA_DIR": str(dirs["data"]),
        "DOCKER_HOST": "unix:///nonexistent.sock",
    }
    return subprocess.run(
        [sys.executable, "-m", "sparkdeck", *args],
        capture_output=True,
        env=env,
        timeout=60,
        cwd=Path(__file__).parents[2],
    )


@pytest.fixture
def server():
    with LoopbackOpenAI(models=("m\x1b[31m",)) as running:
        yield running


@pytest.fixture
def dirs(tmp_path: Path) -> dict[str, Path]:
    found = {"config": tmp_path / "config", "data": tmp_path / "data"}
    for path in found.values():
        path.mkdir()
    return found


def test_clean_shows_every_control_character_and_keeps_text():
    assert clean("plain text, ünïcödé ✓") == "plain text, ünïcödé ✓"
    assert clean("a\tb\nc\r\nd") == "a\tb\nc\nd"
    assert clean("\x1b[2J\x07\x00\x7f\x9b\r") == "␛[2J␇␀␡\\x9b␍"
    assert excerpt("<p>\n  a \x1b  b\n</p>" * 50, 30).endswith("…")
    assert len(excerpt("x" * 500, 30)) == 30


def test_cli_chat_and_its_export_carry_no_control_bytes(server, dirs):
    server.answer(_hostile_reply())
    done = _sparkdeck(
        ["chat", "hi", "--save", "--endpoint", server.url, "--kind", "llamacpp"], dirs
    )
    assert done.returncode == 0, done.stderr
    assert not _OBEYED.findall(done.stdout), done.stdout
    assert not _OBEYED.findall(done.stderr), done.stderr
    # nothing is lost: each control character is there as a visible stand-in
    assert (
        "Hello ␛[2J␛[H␛]0;pwned␇ there␀ \\x9b31m red␡ over␍write\nnext\tline"
        in done.stdout.decode()
    )
    assert "m␛[31m" in done.stderr.decode()  # the model name the server listed, too

    listed = _sparkdeck(["conversations", "--json"], dirs)
    conversation = json.loads(listed.stdout)[0]["id"]
    exported = _sparkdeck(["conversations", "export", conversation], dirs)
    assert exported.returncode == 0, exported.stderr
    assert b"Hello" in exported.stdout and not _OBEYED.findall(exported.stdout)


def test_an_html_error_page_is_reduced_to_status_type_and_a_short_excerpt(server, dirs):
    page = (
        "<!DOCTYPE html><html><head><title>502 Bad Gateway\x1b]0;x\x07</title></head>"
        "<body>" + "<p>nginx upstream trouble</p>\n" * 200 + "</body></html>"
    )
    server.answer(Scripted([page.encode()], status=502, content_type="text/html"))
    done = _sparkdeck(["chat", "hi", "--endpoint", server.url, "--kind", "llamacpp"], dirs)
    assert done.returncode == 1
    err = done.stderr.decode()
    assert not _OBEYED.findall(done.stderr)
    assert f"HTTP 502 from {server.url}/v1/chat/completions: text/html: 502 Bad Gateway" in err
    assert "<p>" not in err and len(err) < 400, err


def test_an_in_stream_error_message_is_cleaned(server, dirs):
    event = {"error": {"message": "boom\x1b[2J" + "x" * 5000, "code": 500}}
    server.answer(Scripted([chunk_event("partial"), f"data: {json.dumps(event)}\n\n".encode()]))
    done = _sparkdeck(["chat", "hi", "--endpoint", server.url, "--kind", "vllm"], dirs)
    assert done.returncode == 1
    assert not _OBEYED.findall(done.stderr)
    assert "the server stopped the reply: boom␛[2J" in done.stderr.decode()
    assert len(done.stderr) < 800


@pytest.mark.anyio
async def test_the_chat_pane_shows_control_characters_and_no_markup(server):
    server.answer(_hostile_reply())
    app = PaneHost(server.url, kind="llamacpp", save=True)

    async def scenario() -> None:
        async with app.run_test(size=(100, 40)) as pilot:
            app.pane.query_one("#chat-input", Input).value = "[bold red]hi[/]"
            await pilot.press("enter")
            await wait_until(
                pilot,
                lambda: not app.pane.streaming and bool(app.pane.query(ReplyView)),
                what="the reply",
            )
            view = app.pane.query_one(ReplyView)
            assert "\x1b" not in view.content_text and "␛[2J" in view.content_text
            # the conversation list shows a title that looks like markup as written
            app.pane.action_open_conversations()
            await wait_until(
                pilot,
                lambda: isinstance(app.screen, ConversationsScreen),
                what="the conversations list",
            )
            await pilot.pause(0.1)
            options = app.screen.query_one(OptionList)
            shown = "\n".join(options.render_line(y).text for y in range(options.size.height))
            assert "[bold red]hi[/]" in shown, shown

    await scenario()


@pytest.mark.anyio
async def test_a_failing_worker_in_the_chat_pane_shows_a_notification(server, tmp_path):
    app = PaneHost(server.url, kind="vllm")
    broken = tmp_path / "not-a-conversation.jsonl"
    broken.mkdir()  # reading it fails in the pane's load worker

    async def scenario() -> None:
        async with app.run_test(size=(100, 40), notifications=True) as pilot:
            app.pane._chosen(broken)
            await wait_until(
                pilot,
                lambda: any("chat-load failed" in str(n.title) for n in app._notifications),
                timeout=10.0,
                what="the failure's notification",
            )
            note = next(n for n in app._notifications if "chat-load failed" in str(n.title))
            assert note.severity == "error" and note.message

    await scenario()


@pytest.mark.anyio
async def test_a_failing_export_on_the_conversations_screen_shows_a_notification(server, tmp_path):
    from sparkdeck.chat.store import ConversationSummary

    gone = ConversationSummary("c1", tmp_path / "gone.jsonl", "a title", "2026-12-01T00:00", "m", 2)
    app = PaneHost(server.url, kind="vllm")

    async def scenario() -> None:
        async with app.run_test(size=(100, 40), notifications=True) as pilot:
            app.push_screen(ConversationsScreen([gone]))
            await wait_until(
                pilot,
                lambda: (
                    isinstance(app.screen, ConversationsScreen)
                    and bool(app.screen.query(OptionList))
                ),
                what="the conversations list",
            )
            app.screen.query_one(OptionList).highlighted = 0
            await pilot.press("e")  # the export worker fails: the file is gone
            await wait_until(
                pilot,
                lambda: any("chat-export failed" in str(n.title) for n in app._notifications),
                timeout=10.0,
                what="the failure's notification",
            )

    await scenario()
