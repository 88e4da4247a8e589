"""The endpoint's meter and request log, as pure logic on recorded bytes.

The meter is fed llama-server b11434's own SSE recording (tests/fixtures/sse) cut at
awkward places: a meter that parsed per chunk, read only `usage`, or counted the cached
prompt tokens wrong gets these wrong. The log's rotation is checked at its size bound.
"""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

from sparkdeck.endpoint import stream_meter
from sparkdeck.endpoint.request_log import RequestLog, RequestRecord
from sparkdeck.endpoint.stream_meter import Meter

RECORDED = (
    Path(__file__).parents[1] / "fixtures" / "sse" / "llamacpp_b11434_usage_timings.sse"
).read_bytes()


def fed(body: bytes, stream: bool = True, piece: int = 3) -> dict:
    meter = Meter(0.0, stream, readable=True)
    for start in range(0, len(body), piece):
        meter.feed(body[start : start + piece])
    return meter.figures()


def without(body: bytes, key: str) -> bytes:
    events = []
    for event in body.split(b"\n\n"):
        if event.startswith(b"data: {"):
            data = json.loads(event[6:])
            data.pop(key, None)
            event = b"data: " + json.dumps(data).encode()
        events.append(event)
    return b"\n\n".join(events)


def test_usage_from_the_final_chunk_even_when_cut_across_reads():
    figures = fed(RECORDED)
    assert (figures["prompt_tokens"], figures["output_tokens"], figures["tokens_from"]) == (
        25,
        6,
        "usage",
    )


def test_llama_timings_when_no_usage_was_asked_counting_the_cached_prompt():
    figures = fed(without(RECORDED, "usage"))
    # prompt_n 17 were computed, cache_n 8 came from the cache: the prompt had 25
    assert (figures["prompt_tokens"], figures["output_tokens"], figures["tokens_from"]) == (
        25,
        6,
        "timings",
    )


def test_events_counted_when_the_engine_says_nothing_and_labelled_as_such():
    figures = fed(without(without(RECORDED, "usage"), "timings"))
    # 5 events: 2 with content, the finish_reason one, the (now empty) last one, [DONE]
    assert figures["tokens_from"] == "chunks" and figures["output_tokens"] == 3


def test_a_whole_answer_reads_its_usage_and_claims_no_ttft():
    body = json.dumps(
        {"choices": [], "usage": {"prompt_tokens": 9, "completion_tokens": 4}}
    ).encode()
    figures = fed(body, stream=False)
    assert (figures["prompt_tokens"], figures["output_tokens"]) == (9, 4)
    assert figures["ttft_s"] is None and figures["decode_tps"] is None


def test_the_request_log_rotates_at_its_bound_and_reads_both_files(tmp_path):
    log = RequestLog(tmp_path / "requests.jsonl", max_bytes=2000)
    for i in range(40):
        log.append(
            RequestRecord(
                time=1000.0 + i,
                client="127.0.0.1:1",
                path="/v1/completions",
                model="m",
                status=200,
                stream=False,
                output_tokens=i,
            )
        )
    current = (tmp_path / "requests.jsonl").stat().st_size
    older = (tmp_path / "requests.jsonl.1").stat().st_size
    assert current <= 2000 and older <= 2000
    rows = list(log.read())
    counts = [r["output_tokens"] for r in rows]
    assert counts == sorted(counts) and counts[-1] == 39 and len(rows) < 40  # oldest dropped
    assert [r["output_tokens"] for r in log.read(since=1037.0)] == [37, 38, 39]


def test_decode_speed_counts_only_the_tokens_after_the_first_read(monkeypatch):
    """Ten events read at once, then one more 0.1 s later: one token in 0.1 s is 10 tok/s.
    Counting the first read's tokens as if they had taken time would say 100 tok/s."""
    clock = iter([1.0, 1.1, 1.2])  # the two reads, then the end
    # the meter's own clock only: patching `time.monotonic` itself would hand this finite
    # clock to everything that reads the time until the test's teardown is over
    monkeypatch.setattr(stream_meter, "time", SimpleNamespace(monotonic=lambda: next(clock)))
    event = b'data: {"choices":[{"delta":{"content":"x"}}]}\n\n'
    meter = Meter(0.0, stream=True, readable=True)  # arrived at 0.0
    meter.feed(event * 10)  # at 1.0
    meter.feed(
        event + b'data: {"choices":[],"usage":{"prompt_tokens":3,'
        b'"completion_tokens":11}}\n\ndata: [DONE]\n\n'
    )  # at 1.1
    figures = meter.figures()  # ended at 1.2
    assert figures["output_tokens"] == 11 and figures["ttft_s"] == 1.0
    assert figures["decode_tps"] == 10.0


def test_a_stream_read_in_one_go_has_no_decode_speed():
    meter = Meter(0.0, stream=True, readable=True)
    meter.feed(
        b'data: {"choices":[{"delta":{"content":"x"}}]}\n\n' * 5 + b'data: {"choices":'
        b'[],"usage":{"prompt_tokens":3,"completion_tokens":5}}\n\ndata: [DONE]\n\n'
    )
    figures = meter.figures()
    assert figures["output_tokens"] == 5 and figures["decode_tps"] is None


def test_a_stream_has_ended_only_once_its_done_event_came_through():
    """A client that hangs up after [DONE] got the whole answer: not an early disconnect."""
    cut = Meter(0.0, stream=True, readable=True)
    cut.feed(RECORDED[: len(RECORDED) // 2])
    assert not cut.stream_ended()
    whole = Meter(0.0, stream=True, readable=True)
    for start in range(0, len(RECORDED), 5):  # [DONE] cut across reads
        whole.feed(RECORDED[start : start + 5])
    assert whole.stream_ended()
    assert not Meter(0.0, stream=False, readable=True).stream_ended()
