"""The streaming chat client against a real loopback HTTP server and recorded SSE bodies."""

from __future__ import annotations

import itertools
import json
import threading
import time
from pathlib import Path

import pytest

from sparkdeck.chat.client import ChatClient, ChatRequest, Timed, api_key_from_env, stream_chat
from sparkdeck.chat.deltas import (
    Content,
    Done,
    Finished,
    Opened,
    Reasoning,
    Timings,
    ToolCall,
    Usage,
    parse_chunk,
)
from sparkdeck.chat.errors import (
    HTTPErrorReply,
    ProtocolError,
    ServerUnreachable,
    StreamErrorEvent,
)
from sparkdeck.chat.reply import ReplyBuilder
from tests.conftest import free_port
from tests.support.openai_loopback import LoopbackOpenAI, Scripted, chunk_event, sse_events

SSE = Path(__file__).parents[1] / "fixtures" / "sse"
HELLO = ChatRequest([{"role": "user", "content": "hello"}], max_tokens=16)


@pytest.fixture
def server():
    with LoopbackOpenAI() as running:
        yield running


def _recorded(name: str) -> Scripted:
    return Scripted(sse_events((SSE / name).read_text(encoding="utf-8")))


def _reply(server: LoopbackOpenAI, request: ChatRequest = HELLO) -> ReplyBuilder:
    builder = ReplyBuilder(time.perf_counter())
    with ChatClient(server.url) as client, client.stream(request) as stream:
        for timed in stream:
            builder.add(timed)
    return builder


@pytest.mark.parametrize(
    "name, reasoning, content, completion_tokens",
    [
        ("vllm_new_reasoning.sse", "The user greets me.", "Hello!", 4),
        ("vllm_old_reasoning_content.sse", "Two plus two is four.", "4", 4),
        ("sglang_reasoning_content.sse", "Okay, the user says hi.", "Hi there", 6),
        ("llamacpp_reasoning_content.sse", "Hmm, easy.", "Yes.", 3),  # no usage: pieces
        ("vllm_transition_both_fields.sse", "Thinking.", "Done", 3),
    ],
)
def test_each_engines_reasoning_shape(server, name, reasoning, content, completion_tokens):
    server.answer(_recorded(name))
    reply = _reply(server)
    assert reply.reasoning_text == reasoning
    assert reply.text == content
    assert reply.figures().completion_tokens == completion_tokens
    assert reply.finish_reason == "stop"


def test_reasoning_keeps_the_field_name_it_came_in():
    assert parse_chunk({"choices": [{"index": 0, "delta": {"reasoning": "a"}}]}) == [
        Reasoning("a", "reasoning")
    ]
    assert parse_chunk({"choices": [{"index": 1, "delta": {"reasoning_content": "b"}}]}) == [
        Reasoning("b", "reasoning_content", 1)
    ]


def test_recorded_llamacpp_stream_carries_usage_and_server_timings(server):
    server.answer(_recorded("llamacpp_b11434_usage_timings.sse"))
    with ChatClient(server.url) as client:
        events = list(client.stream(HELLO))
    deltas = [e.delta for e in events]
    assert isinstance(deltas[0], Opened) and deltas[-1] == Done()
    usage = next(d for d in deltas if isinstance(d, Usage))
    timings = next(d for d in deltas if isinstance(d, Timings))
    assert (usage.prompt_tokens, usage.completion_tokens) == (25, 6)
    assert timings.predicted_n == 6 and timings.predicted_per_second == pytest.approx(8.111061)
    assert Finished("length") in deltas
    # llama-server held back bytes of unfinished UTF-8: 6 tokens came as 2 pieces, which is
    # why the server's usage count wins over counting pieces
    assert sum(isinstance(d, Content) for d in deltas) == 2
    builder = ReplyBuilder(events[0].at)
    for timed in events:
        builder.add(timed)
    assert builder.figures().completion_tokens == 6


def test_tool_calls_are_passed_through_raw(server):
    server.answer(_recorded("vllm_tool_calls.sse"))
    with ChatClient(server.url) as client:
        calls = [e.delta for e in client.stream(HELLO) if isinstance(e.delta, ToolCall)]
    assert json.loads(calls[0].raw)["function"]["name"] == "get_weather"
    assert json.loads(calls[1].raw)["function"]["arguments"] == '{"city": "Oslo"}'


@pytest.mark.parametrize(
    "name, message",
    [
        ("vllm_error_after_200.sse", "Internal server error"),
        ("vllm_old_error_after_200.sse", "The prompt is too long for this model"),
        ("llamacpp_b11434_context_exceeded.sse", "Context size has been exceeded."),
    ],
)
def test_error_events_after_http_200_raise_with_the_servers_message(server, name, message):
    server.answer(_recorded(name))
    seen: list[Timed] = []
    with ChatClient(server.url) as client, pytest.raises(StreamErrorEvent) as caught:
        for timed in client.stream(HELLO):
            seen.append(timed)
    assert caught.value.server_message == message
    assert message in str(caught.value)
    assert any(isinstance(t.delta, Content) for t in seen)  # what came before is kept


@pytest.mark.parametrize(
    "data, message",
    [(b'{"detail": "overloaded"}', "overloaded"), (b"engine restarting", "engine restarting")],
)
def test_sse_error_event_type_without_an_error_object(server, data, message):
    server.answer(Scripted([b"event: error\ndata: " + data + b"\n\n"]))
    with ChatClient(server.url) as client, pytest.raises(StreamErrorEvent) as caught:
        list(client.stream(HELLO))
    assert caught.value.server_message == message


def test_undecodable_data_is_a_protocol_error(server):
    server.answer(Scripted([b"data: {not json\n\n"]))
    with ChatClient(server.url) as client, pytest.raises(ProtocolError, match="undecodable"):
        list(client.stream(HELLO))


@pytest.mark.parametrize(
    "status, body, message",
    [
        (
            400,
            {
                "error": {
                    "code": 400,
                    "message": "Unable to generate parser for this template.",
                    "type": "invalid_request_error",
                }
            },
            "Unable to generate parser for this template.",
        ),
        (
            404,
            {
                "object": "error",
                "message": "The model `nope` does not exist.",
                "type": "NotFoundError",
                "param": None,
                "code": 404,
            },
            "The model `nope` does not exist.",
        ),
        (
            422,
            {"detail": [{"loc": ["body", "messages"], "msg": "Field required"}]},
            "Field required",
        ),
    ],
)
def test_http_errors_show_the_servers_own_message(server, status, body, message):
    server.answer(
        Scripted([json.dumps(body).encode()], status=status, content_type="application/json")
    )
    with ChatClient(server.url) as client, pytest.raises(HTTPErrorReply) as caught:
        list(client.stream(HELLO))
    assert caught.value.status == status
    assert caught.value.server_message == message
    assert str(caught.value).startswith(f"HTTP {status} from {server.url}")


def test_http_error_without_json_keeps_the_text(server):
    server.answer(Scripted([b"upstream timed out"], status=502, content_type="text/plain"))
    with ChatClient(server.url) as client, pytest.raises(HTTPErrorReply, match="upstream timed"):
        list(client.stream(HELLO))


def test_a_json_answer_to_a_stream_request_is_a_protocol_error(server):
    server.answer(Scripted([b'{"choices": []}'], content_type="application/json"))
    with ChatClient(server.url) as client, pytest.raises(ProtocolError, match="event stream"):
        list(client.stream(HELLO))


def test_nothing_listening_is_unreachable():
    with ChatClient(f"http://127.0.0.1:{free_port()}") as client:  # nobody listens there
        with pytest.raises(ServerUnreachable, match="is the engine running"):
            client.models()
        with pytest.raises(ServerUnreachable, match="nothing answers"):
            list(client.stream(ChatRequest([], model="m")))


def test_request_body_model_from_server_extras_merged_and_key_from_env(server, monkeypatch):
    monkeypatch.delenv("SPARKDECK_TEST_KEY_A", raising=False)
    monkeypatch.setenv("SPARKDECK_TEST_KEY_B", "sk-test-123")
    key = api_key_from_env(["SPARKDECK_TEST_KEY_A", "SPARKDECK_TEST_KEY_B"])
    assert key == "sk-test-123"
    server.answer(_recorded("vllm_new_reasoning.sse"))
    request = ChatRequest(
        [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hi"}],
        max_tokens=32,
        temperature=0.2,
        extra={
            "ignore_eos": True,
            "min_tokens": 8,
            "stream_options": {"continuous_usage_stats": True},
            "chat_template_kwargs": {"enable_thinking": False},
        },
    )
    with ChatClient(server.url, api_key=key) as client:
        list(client.stream(request))
    sent = server.next_request()
    assert sent["path"] == "/v1/chat/completions"
    assert sent["authorization"] == "Bearer sk-test-123"
    assert sent["body"] == {
        "model": "loopback-model",
        "stream": True,
        "max_tokens": 32,
        "temperature": 0.2,
        "messages": [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hi"}],
        "stream_options": {"include_usage": True, "continuous_usage_stats": True},
        "ignore_eos": True,
        "min_tokens": 8,
        "chat_template_kwargs": {"enable_thinking": False},
    }


def test_no_key_no_authorization_header(server):
    server.answer(_recorded("vllm_new_reasoning.sse"))
    with ChatClient(server.url) as client:
        list(client.stream(ChatRequest([{"role": "user", "content": "x"}], model="named")))
    sent = server.next_request()
    assert sent["authorization"] is None and sent["body"]["model"] == "named"


def test_each_event_is_timed_when_it_arrives_not_in_a_batch(server):
    server.answer(
        Scripted(
            [chunk_event("a"), chunk_event("b"), chunk_event("c"), b"data: [DONE]\n\n"], pause=0.15
        )
    )
    builder = ReplyBuilder(time.perf_counter())
    times = []
    with ChatClient(server.url) as client:
        for timed in client.stream(ChatRequest([{"role": "user", "content": "x"}], model="m")):
            builder.add(timed)
            if isinstance(timed.delta, Content):
                times.append(timed.at)
    gaps = [b - a for a, b in itertools.pairwise(times)]
    assert len(gaps) == 2 and all(gap > 0.1 for gap in gaps)
    figures = builder.figures()
    assert figures.ttft_s is not None and figures.ttft_s > 0.1  # headers came 0.15 s early
    assert figures.decode_tps == pytest.approx(2 / (times[-1] - times[0]))
    assert figures.tokens_from == "chunks"


def test_cancel_from_another_thread_wakes_a_blocked_reader_and_the_server_sees_it(server):
    # One token, then the server goes quiet for 2 s between tokens: the reader is blocked in
    # recv when cancel() comes, so only a socket shutdown can end the wait early.
    server.answer(Scripted([chunk_event("first")], pause=2.0, repeat_forever=chunk_event("more")))
    with ChatClient(server.url) as client:
        stream = client.stream(ChatRequest([{"role": "user", "content": "x"}], model="m"))
        got = []
        started = time.perf_counter()
        for timed in stream:
            got.append(timed.delta)
            if isinstance(timed.delta, Content):
                threading.Timer(0.2, stream.cancel).start()
        ended = time.perf_counter() - started
    assert stream.cancelled and not stream.finished_normally
    assert [d for d in got if isinstance(d, Content)] == [Content("first")]
    assert ended < 3.5  # first token after 2 s, cancel 0.2 s later; the next was due at 4 s
    assert server.disconnected.wait(6), "the server never saw the client go away"


def test_closing_the_generator_aborts_the_request(server):
    server.answer(Scripted([chunk_event("x")] * 3, pause=0.05, repeat_forever=chunk_event("y")))
    replies = stream_chat(server.url, ChatRequest([{"role": "user", "content": "x"}]))
    contents = 0
    for timed in replies:
        contents += isinstance(timed.delta, Content)
        if contents == 3:
            break
    replies.close()
    assert server.disconnected.wait(5)


def test_figures_prefer_usage_and_keep_the_servers_speed_apart():
    builder = ReplyBuilder(sent_at=10.0)
    for at, delta in [
        (10.5, Reasoning("r")),
        (10.6, Content("a")),
        (11.5, Content("b")),
        (11.5, Finished("length")),
        (11.6, Usage(7, 10, 17)),
        (11.6, Timings(12.5, 100.0, 10, 7, 0)),
    ]:
        builder.add(Timed(at, delta))
    figures = builder.figures()
    assert figures.ttft_s == pytest.approx(0.5)
    assert figures.decode_tps == pytest.approx(9 / 1.0)  # 10 tokens, first at 10.5, last 11.5
    assert (figures.completion_tokens, figures.prompt_tokens) == (10, 7)
    assert figures.tokens_from == "usage" and figures.server_tps == 12.5
    assert figures.summary() == "TTFT 0.50 s · 9.0 tok/s (server 12.5) · 10 tok · length"


def test_figures_of_an_empty_reply_are_absent_not_zero():
    figures = ReplyBuilder(sent_at=1.0).figures()
    assert figures.ttft_s is None and figures.decode_tps is None
    assert figures.completion_tokens is None and figures.summary() == ""
