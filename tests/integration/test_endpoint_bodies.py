"""Bad and big request bodies at the endpoint (issue 26): the real service, its endpoint in
front of an attached engine stand-in that reads every body whole, over real loopback HTTP.

What a broken endpoint gets wrong: JSON nested 100,000 deep answered with a plain-text 500
and a RecursionError traceback in service.log; a body that is not a JSON object forwarded to
the engine (or refused without a log line); bodies sent together all held at once (six
concurrent 50 MB bodies took the service to 1,019 MiB RSS); a chunked body never counted
against the bound; a reservation never given back, so the endpoint refuses for good.
"""

from __future__ import annotations

import socket
import threading
import time

import psutil
import pytest

from sparkdeck.endpoint.request_body import HELD_AT_ONCE, MAX_REQUEST
from tests.support.cli import wait_for
from tests.support.endpoint_service import MODEL, Answer, ask, endpoint, rows_of  # noqa: F401
from tests.support.service_env import service_env  # noqa: F401 - a fixture

pytestmark = pytest.mark.docker  # the service follows Docker (the engine is attached)
CHAT = "/v1/chat/completions"
MIB = 2**20


def chat_of_size(size: int) -> bytes:
    """A valid chat request of exactly `size` bytes (its one message padded)."""
    head = b'{"model": "%s", "messages": [{"role": "user", "content": "' % MODEL.encode()
    tail = b'"}]}'
    return head + b"x" * (size - len(head) - len(tail)) + tail


def one_line_each(data, answers: list[Answer]) -> list[dict]:
    """The one request-log line of each answer (waits for the off-loop writes)."""
    wait_for(
        lambda: all(rows_of(data, a) for a in answers),
        timeout=10,
        what="a request-log line for each request",
    )
    time.sleep(0.5)  # a second line for one of them would have come as quickly
    rows = [rows_of(data, a) for a in answers]
    assert all(len(r) == 1 for r in rows), rows
    return [r[0] for r in rows]


def test_bodies_that_are_not_a_json_object_get_400_in_openais_shape(endpoint):
    nested = (
        b'{"model": "%s", "messages": ' % MODEL.encode() + b"[" * 100_000 + b"]" * 100_000 + b"}"
    )
    bad = {
        "nested 100,000 deep": nested,
        "unparseable": b'{"model": "sink-7b", "messages"',
        "not an object": b'["sink-7b"]',
        "empty": b"",
        "not UTF-8": b'{"model": "\xff"}',
    }
    received = len(endpoint["engine"].received)
    answers = {
        what: ask(endpoint["port"], "POST", CHAT, body, {"Content-Type": "application/json"})
        for what, body in bad.items()
    }
    for what, answer in answers.items():
        assert answer.status == 400, (what, answer)
        assert answer.error["type"] == "invalid_request_error", what
        assert answer.error["code"] in ("invalid_json", "invalid_body"), what
    assert "nested too deeply" in answers["nested 100,000 deep"].error["message"]
    assert len(endpoint["engine"].received) == received  # none went on to the engine
    rows = one_line_each(endpoint["data"], list(answers.values()))
    assert all(r["status"] == 400 and r["error"] and r["path"] == CHAT for r in rows)
    service_log = (endpoint["data"] / "service.log").read_text()
    assert "Traceback" not in service_log and "RecursionError" not in service_log


def _held_open(port: int, size: int, first: bytes) -> socket.socket:
    """A request announcing `size` bytes whose body has only begun: its reservation holds."""
    sock = socket.create_connection(("127.0.0.1", port))
    sock.sendall(
        f"POST {CHAT} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        f"Content-Length: {size}\r\n\r\n".encode()
        + first
    )
    return sock


def _chunked(port: int, total: int) -> Answer:
    """A chunked body of `total` bytes in 1 MiB pieces (no Content-Length to reserve by:
    http.client chunks an iterable body itself)."""
    body = chat_of_size(total)
    pieces = (body[i : i + MIB] for i in range(0, len(body), MIB))
    return ask(port, "POST", CHAT, pieces, {"Content-Type": "application/json"})


def test_a_chunked_body_is_counted_as_it_arrives_and_every_share_is_given_back(endpoint):
    port = endpoint["port"]
    big = chat_of_size(60 * MIB)
    held = _held_open(port, len(big), big[:MIB])
    try:
        time.sleep(0.5)  # the endpoint has its headers: 60 MiB of the budget are reserved
        crowded = _chunked(port, 10 * MIB)  # 4 MiB fit beside the 60; the 5th piece does not
        held.sendall(big[MIB:])
        reply = held.recv(65536)
    finally:
        held.close()
    assert reply.startswith(b"HTTP/1.1 200"), reply[:200]
    assert crowded.failed or crowded.status == 503, crowded
    if crowded.status == 503:
        assert crowded.error["code"] == "too_many_bodies" and crowded.headers["retry-after"]
    # alone, a chunked body past the limit is refused as it passes the limit
    too_large = _chunked(port, MAX_REQUEST + 4 * MIB)
    assert too_large.failed or too_large.status == 413, too_large
    # every share came back: a body as large as the whole budget still goes through
    whole = ask(port, "POST", CHAT, chat_of_size(HELD_AT_ONCE))
    assert whole.status == 200, whole
    assert endpoint["engine"].received[-1] == HELD_AT_ONCE
    crowded_row, large_row = one_line_each(endpoint["data"], [crowded, too_large])
    assert crowded_row["status"] == 503 and "retry" in crowded_row["error"]
    assert large_row["status"] == 413 and "64 MiB" in large_row["error"]


def test_ten_concurrent_50_mb_bodies_keep_the_service_under_300_mib(endpoint):
    service = psutil.Process(endpoint["pid"])
    baseline = service.memory_info().rss
    peak, sampling = [baseline], threading.Event()

    def sample() -> None:  # the whole run, every 10 ms: a peak between samples is short
        while not sampling.is_set():
            peak.append(service.memory_info().rss)
            time.sleep(0.01)

    body = chat_of_size(50_000_000)
    forwarded = len(endpoint["engine"].received)
    gate = threading.Barrier(10)
    answers: list[Answer] = []

    def send() -> None:
        gate.wait()
        answers.append(
            ask(
                endpoint["port"],
                "POST",
                CHAT,
                body,
                {"Content-Type": "application/json"},
                timeout=120,
            )
        )

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    senders = [threading.Thread(target=send) for _ in range(10)]
    for sender in senders:
        sender.start()
    for sender in senders:
        sender.join(timeout=180)
    time.sleep(0.5)  # after the last answer: the memory freed once the bodies were sent on
    sampling.set()
    sampler.join()
    print(
        f"service RSS: {baseline / MIB:.0f} MiB before, peak {max(peak) / MIB:.0f} MiB "
        f"during ten concurrent 50 MB bodies; answers: "
        f"{sorted(str(a.status or a.failed) for a in answers)}"
    )

    assert len(answers) == 10
    rows = one_line_each(endpoint["data"], answers)
    for answer, row in zip(answers, rows, strict=True):
        # an answer, or a connection that closed after the endpoint refused (its line says)
        assert answer.status in (200, 503) or (answer.failed and row["status"] in (413, 503)), (
            answer,
            row,
        )
        if answer.status is not None:
            assert row["status"] == answer.status
        if answer.status == 503:
            assert answer.error["code"] == "too_many_bodies"
            assert answer.headers["retry-after"] == "1"
    assert any(a.status == 200 for a in answers)  # the bound lets a body through whole
    assert any(r["status"] == 503 for r in rows)  # and kept the others out
    got = endpoint["engine"].received[forwarded:]
    assert len(got) == sum(a.status == 200 for a in answers)  # each 200 was the engine's
    assert all(size == len(body) for size in got)  # and had the whole body
    assert max(peak) < 300 * MIB, f"peak RSS {max(peak) / MIB:.0f} MiB"
