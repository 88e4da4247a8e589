"""`sparkdeck chat` and `sparkdeck conversations` against a real loopback OpenAI server."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from sparkdeck.cli import main
from sparkdeck.engines import KINDS, get_kind
from tests.support.openai_loopback import LoopbackOpenAI, Scripted, sse_events

SSE = Path(__file__).parents[1] / "fixtures" / "sse"


@pytest.fixture
def server():
    with LoopbackOpenAI(models=("qwen3",)) as running:
        yield running


def _answer(server: LoopbackOpenAI, name: str) -> None:
    # a pause between events: tokens that arrive together have no decode rate between them
    server.answer(Scripted(sse_events((SSE / name).read_text(encoding="utf-8")), pause=0.005))


def test_json_carries_reply_reasoning_and_figures(server, capsys):
    # tokens 60 ms apart: a decode long enough for a client rate (sparkdeck.chat.reply)
    server.answer(
        Scripted(
            sse_events((SSE / "llamacpp_reasoning_content.sse").read_text(encoding="utf-8")),
            pause=0.06,
        )
    )
    code = main(
        [
            "chat",
            "Is it?",
            "--system",
            "be brief",
            "--max-tokens",
            "32",
            "--json",
            "--endpoint",
            server.url,
            "--kind",
            "llamacpp",
        ]
    )
    assert code == 0
    out = json.loads(capsys.readouterr().out)
    assert out["reply"] == "Yes." and out["reasoning"] == "Hmm, easy."
    assert out["server_tps"] == 50.0 and out["completion_tokens"] == 3
    assert out["tokens_from"] == "chunks" and out["ttft_s"] > 0
    assert out["client_tps"] > 0 and out["model"] == "qwen3" and out["kind"] == "llamacpp"
    assert out["error"] is None and out["conversation"] is None
    sent = server.next_request()["body"]
    assert sent["messages"] == [
        {"role": "system", "content": "be brief"},
        {"role": "user", "content": "Is it?"},
    ]
    assert sent["max_tokens"] == 32 and "chat_template_kwargs" not in sent


def test_plain_output_streams_the_answer_to_stdout_only(server, capsys):
    _answer(server, "vllm_new_reasoning.sse")
    assert main(["chat", "hi", "--endpoint", server.url, "--kind", "vllm"]) == 0
    captured = capsys.readouterr()
    assert captured.out == "Hello!\n"
    assert "The user greets me." in captured.err
    assert "[qwen3 · TTFT" in captured.err and "· 4 tok]" in captured.err


@pytest.mark.parametrize("flag, expected", [("--thinking", True), ("--no-thinking", False)])
def test_thinking_switch_is_mapped_by_the_engine_kind(server, flag, expected):
    for kind in ("vllm", "ollama"):
        _answer(server, "vllm_new_reasoning.sse")
        assert main(["chat", "hi", flag, "--endpoint", server.url, "--kind", kind]) == 0
        sent = server.next_request()["body"]
        for key, value in get_kind(kind).thinking_fields(expected).items():
            assert sent[key] == value


def test_server_error_exits_1_with_its_message(server, capsys):
    server.answer(
        Scripted(
            [
                json.dumps(
                    {"object": "error", "message": "The model `qwen3` does not exist.", "code": 404}
                ).encode()
            ],
            status=404,
            content_type="application/json",
        )
    )
    assert main(["chat", "hi", "--endpoint", server.url, "--kind", "vllm", "--json"]) == 1
    captured = capsys.readouterr()
    assert json.loads(captured.out)["error"].endswith("The model `qwen3` does not exist.")
    assert captured.err.strip().startswith("sparkdeck: HTTP 404 from ")


def test_in_stream_error_keeps_the_partial_reply_and_fails(server, capsys):
    _answer(server, "vllm_error_after_200.sse")
    assert main(["chat", "hi", "--endpoint", server.url, "--kind", "vllm"]) == 1
    captured = capsys.readouterr()
    assert captured.out == "Par\n"
    assert "the server stopped the reply: Internal server error" in captured.err


def test_no_engine_anywhere_says_what_to_do(capsys, monkeypatch):
    monkeypatch.setenv("DOCKER_HOST", "unix:///nonexistent/docker.sock")
    assert main(["chat", "hi"]) == 1
    assert "no engine to chat with" in capsys.readouterr().err


def test_saved_conversation_is_continued_listed_and_exported(server, capsys, tmp_path):
    _answer(server, "vllm_old_reasoning_content.sse")
    assert (
        main(
            [
                "chat",
                "2+2?",
                "--save",
                "--system",
                "math",
                "--json",
                "--endpoint",
                server.url,
                "--kind",
                "vllm",
            ]
        )
        == 0
    )
    conversation = json.loads(capsys.readouterr().out)["conversation"]
    server.next_request()
    _answer(server, "vllm_new_reasoning.sse")
    assert (
        main(
            [
                "chat",
                "and 3+3?",
                "--continue",
                conversation[:15],
                "--json",
                "--endpoint",
                server.url,
                "--kind",
                "vllm",
            ]
        )
        == 0
    )
    assert json.loads(capsys.readouterr().out)["conversation"] == conversation
    assert server.next_request()["body"]["messages"] == [
        {"role": "system", "content": "math"},
        {"role": "user", "content": "2+2?"},
        {"role": "assistant", "content": "4"},
        {"role": "user", "content": "and 3+3?"},
    ]

    assert main(["conversations", "--json"]) == 0
    (row,) = json.loads(capsys.readouterr().out)
    assert row["id"] == conversation and row["turns"] == 4 and row["title"] == "2+2?"
    target = tmp_path / "out.md"
    assert main(["conversations", "export", conversation, "-o", str(target)]) == 0
    text = target.read_text()
    assert "Two plus two is four." in text and "\nHello!\n" in text


def test_every_kind_has_a_thinking_mapping():
    for kind in KINDS.values():
        on, off = kind.thinking_fields(True), kind.thinking_fields(False)
        assert on and off and on != off, kind.name
