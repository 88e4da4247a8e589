"""The endpoint's connection to the engine (sparkdeck/endpoint/upstream_http.py), against real
servers on loopback that answer the way engines do: a kept-alive connection, a chunked
stream, a connection the engine closes under the pool, an answer ended by the close, one cut
mid-body, a malformed one, a caller that stops reading.

Each server is a plain asyncio server in the test's loop, written byte for byte (a library
server would normalise exactly what is being tested); every connection it accepted and every
request it read is kept for the asserts. The end to end behaviour through the real service
and llama-server is tests/integration/test_endpoint_traffic.py's.
"""

from __future__ import annotations

import asyncio
import gc
from collections.abc import Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

import pytest

from sparkdeck.endpoint import upstream_http
from sparkdeck.endpoint.upstream_http import UpstreamError, UpstreamPool
from tests.conftest import free_port

pytestmark = pytest.mark.anyio
BODY = b'{"model":"m","stream":true}'
SSE = b'data: {"choices":[{"delta":{"content":"hi"}}]}\n\n'


@dataclass
class Engine:
    """A server on loopback: `answer(connection_no, request_no, reader, writer)` answers one
    request read whole; the requests' raw bytes, per connection."""

    answer: Callable[[int, int, asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]
    connections: list[list[bytes]] = field(default_factory=list)
    ended: list[asyncio.Event] = field(default_factory=list)  # each connection's close seen
    url: str = ""

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        number, requests, ended = len(self.connections), [], asyncio.Event()
        self.connections.append(requests)
        self.ended.append(ended)
        try:
            while True:
                try:
                    head = await reader.readuntil(b"\r\n\r\n")
                except (asyncio.IncompleteReadError, ConnectionError):
                    return
                length = next(
                    (
                        int(line.split(b":", 1)[1])
                        for line in head.split(b"\r\n")
                        if line.lower().startswith(b"content-length:")
                    ),
                    0,
                )
                requests.append(head + await reader.readexactly(length))
                await self.answer(number, len(requests) - 1, reader, writer)
                if writer.is_closing():
                    return
        finally:
            ended.set()
            writer.close()


@asynccontextmanager
async def engine(answer: Any):
    served = Engine(answer)
    port = free_port()
    server = await asyncio.start_server(served.handle, "127.0.0.1", port)
    served.url = f"http://127.0.0.1:{port}/v1/chat/completions"
    pool = UpstreamPool()
    try:
        yield served, pool
    finally:
        await pool.close()
        server.close()


def chunked(*parts: bytes, keep_alive: bool = True) -> bytes:
    head = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n"
    head += b"Keep-Alive: timeout=5\r\n\r\n" if keep_alive else b"Connection: close\r\n\r\n"
    return head + b"".join(b"%x\r\n%s\r\n" % (len(p), p) for p in parts) + b"0\r\n\r\n"


def whole(body: bytes, status: bytes = b"200 OK") -> bytes:
    return b"HTTP/1.1 %s\r\nContent-Length: %d\r\n\r\n%s" % (status, len(body), body)


def closing(body: bytes) -> bytes:
    return b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s" % (
        len(body),
        body,
    )


async def answer_with(writer: asyncio.StreamWriter, data: bytes) -> None:
    writer.write(data)
    await writer.drain()


async def test_the_request_goes_as_the_caller_sent_it_plus_host_and_length() -> None:
    async def answer(_c: int, _r: int, _rd: Any, writer: asyncio.StreamWriter) -> None:
        await answer_with(writer, whole(b"{}"))

    async with engine(answer) as (served, pool):
        caller = [(b"X-Caller", b"one"), (b"accept-encoding", b"identity")]
        got = await pool.send("POST", served.url + "?a=1", caller, BODY)
        assert (got.status_code, await got.aread()) == (200, b"{}")
        got.close()
    port = served.url.split(":")[2].split("/")[0]
    assert served.connections[0][0] == (
        b"POST /v1/chat/completions?a=1 HTTP/1.1\r\nhost: 127.0.0.1:" + port.encode() + b"\r\n"
        b"X-Caller: one\r\naccept-encoding: identity\r\n"
        b"content-length: %d\r\n\r\n" % len(BODY) + BODY
    )  # no User-Agent, Accept, Content-Type or Connection of the client's own


async def test_a_chunked_stream_arrives_unchunked_and_its_kept_alive_connection_is_reused() -> None:
    async def answer(_c: int, _r: int, _rd: Any, writer: asyncio.StreamWriter) -> None:
        await answer_with(writer, chunked(SSE, SSE, b"data: [DONE]\n\n"))

    async with engine(answer) as (served, pool):
        for _ in range(3):
            got = await pool.send("POST", served.url, [], BODY)
            assert await got.aread() == SSE + SSE + b"data: [DONE]\n\n"
            got.close()
        assert [len(requests) for requests in served.connections] == [3]
        assert pool.retried == 0


async def test_a_pooled_connection_the_engine_closed_is_sent_again_once_on_a_new_one() -> None:
    """The engine reads the next request on its kept-alive connection and closes it without
    a byte of answer (llama-server after its 100th request, or its idle close racing the
    request): the request goes again on a new connection, and the caller sees one answer."""

    async def answer(conn: int, request: int, _rd: Any, writer: asyncio.StreamWriter) -> None:
        if conn == 0 and request == 1:
            writer.close()  # closed under the pool
            return
        await answer_with(writer, whole(b"ok"))

    async with engine(answer) as (served, pool):
        (await pool.send("POST", served.url, [], BODY)).close()
        again = await pool.send("POST", served.url, [], BODY)
        assert (again.status_code, await again.aread()) == (200, b"ok")
        assert pool.retried == 1 and pool.failures == 0
        assert [len(requests) for requests in served.connections] == [2, 1]


async def test_a_new_connection_closed_before_an_answer_is_an_error_never_sent_twice() -> None:
    async def answer(_c: int, _r: int, _rd: Any, writer: asyncio.StreamWriter) -> None:
        writer.close()  # an engine that hangs up on every request

    async with engine(answer) as (served, pool):
        with pytest.raises(UpstreamError, match="closed the connection before it answered"):
            await pool.send("POST", served.url, [], BODY)
        assert (pool.retried, pool.failures) == (0, 1)
        assert [len(requests) for requests in served.connections] == [1]


async def test_an_answer_that_ends_with_the_close_is_whole_and_one_cut_short_is_an_error() -> None:
    async def answer(conn: int, _r: int, _rd: Any, writer: asyncio.StreamWriter) -> None:
        if conn == 0:  # HTTP/1.0 style: no length, the close ends it
            await answer_with(writer, b"HTTP/1.0 200 OK\r\n\r\n" + b"x" * 100_000)
        else:  # 100 bytes promised, 10 sent
            await answer_with(writer, b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n" + b"y" * 10)
        writer.close()

    async with engine(answer) as (served, pool):
        closed_ended = await pool.send("POST", served.url, [], BODY)
        assert await closed_ended.aread() == b"x" * 100_000
        closed_ended.close()
        cut = await pool.send("POST", served.url, [], BODY)
        with pytest.raises(UpstreamError, match="mid-answer"):
            await cut.aread()
        cut.close()


async def test_a_malformed_answer_is_an_error_and_a_refused_connect_names_why() -> None:
    async def answer(_c: int, _r: int, _rd: Any, writer: asyncio.StreamWriter) -> None:
        await answer_with(writer, b"NOT HTTP AT ALL\r\n\r\n")

    async with engine(answer) as (served, pool):
        with pytest.raises(UpstreamError, match="malformed"):
            await pool.send("POST", served.url, [], BODY)
        with pytest.raises(UpstreamError, match="refused"):
            await pool.send("POST", f"http://127.0.0.1:{free_port()}/v1/x", [], BODY)
        assert pool.failures == 2


async def test_an_interim_answer_is_skipped_for_the_real_one() -> None:
    async def answer(_c: int, _r: int, _rd: Any, writer: asyncio.StreamWriter) -> None:
        early = b"HTTP/1.1 103 Early Hints\r\nLink: </a>; rel=preload\r\n\r\n"
        await answer_with(writer, early + whole(b"real", b"201 Created"))

    async with engine(answer) as (served, pool):
        got = await pool.send("POST", served.url, [], BODY)
        assert (got.status_code, await got.aread()) == (201, b"real")
        assert (b"Link", b"</a>; rel=preload") not in got.raw_headers
        got.close()


async def test_closing_an_answer_mid_stream_closes_the_engines_connection() -> None:
    """How an engine learns that the caller went away: its connection closes, at once."""

    async def answer(_c: int, _r: int, reader: Any, writer: asyncio.StreamWriter) -> None:
        head = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
        await answer_with(writer, head + b"%x\r\n%s\r\n" % (len(SSE), SSE))
        assert await reader.read(1) == b""  # a long decode, until the connection closes

    async with engine(answer) as (served, pool):
        got = await pool.send("POST", served.url, [], BODY)
        assert await anext(got.aiter_raw()) == SSE
        got.close()
        await asyncio.wait_for(served.ended[0].wait(), 1.0)  # the engine saw the close


async def test_a_caller_that_stops_reading_holds_the_engine_back_not_memory() -> None:
    """64 MiB of answer that nobody reads: reading from the engine pauses, so the engine's
    own writes block (the kernel's socket buffers hold a few MiB at most)."""
    sent = [0]
    total = 64 * 2**20

    async def answer(_c: int, _r: int, _rd: Any, writer: asyncio.StreamWriter) -> None:
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % total)
        block = b"z" * 2**16
        while sent[0] < total:
            writer.write(block)
            await writer.drain()
            sent[0] += len(block)

    async with engine(answer) as (served, pool):
        got = await pool.send("POST", served.url, [], BODY)
        await asyncio.sleep(1.0)  # the caller reads nothing
        assert sent[0] < 24 * 2**20, f"{sent[0] / 2**20:.0f} MiB read ahead of the caller"
        read = sum([len(chunk) async for chunk in got.aiter_raw()])
        assert read == total  # and once it reads, all of it comes
        got.close()


async def test_an_idle_connection_is_let_go_after_keepalive_s(monkeypatch) -> None:
    """Before the engine's own idle close (llama-server: 5 s; the pool: KEEPALIVE_S = 4 s),
    so a request never gets a connection the engine is closing. Here the period is 0.5 s."""
    assert upstream_http.KEEPALIVE_S < 5.0
    monkeypatch.setattr(upstream_http, "KEEPALIVE_S", 0.5)

    async def answer(_c: int, _r: int, _rd: Any, writer: asyncio.StreamWriter) -> None:
        await answer_with(writer, whole(b"ok"))

    async with engine(answer) as (served, pool):
        (await pool.send("POST", served.url, [], BODY)).close()
        await asyncio.sleep(0.25)
        assert not served.ended[0].is_set()  # kept while it may be used
        await asyncio.wait_for(served.ended[0].wait(), 1.0)  # then let go


async def test_get_json_reads_a_models_list() -> None:
    async def answer(_c: int, _r: int, _rd: Any, writer: asyncio.StreamWriter) -> None:
        await answer_with(writer, whole(b'{"data":[{"id":"m"}]}'))

    async with engine(answer) as (served, pool):
        assert await pool.get_json(served.url) == {"data": [{"id": "m"}]}
        assert served.connections[0][0].startswith(b"GET /v1/chat/completions HTTP/1.1\r\n")
        assert b"content-length" not in served.connections[0][0]


async def test_after_a_stream_the_engine_closed_the_next_request_finds_a_connection_ready() -> None:
    """llama-server closes the connection of every streamed answer: the pool opens the next
    one as the answer ends, so a request after a pause does not wait for a connect (nor for
    docker-proxy to dial the container). It goes on that connection, and nothing more is
    opened while it is idle."""

    async def answer(_c: int, _r: int, _rd: Any, writer: asyncio.StreamWriter) -> None:
        # as llama-server does: the answer says keep-alive, and the connection closes
        # after it, before or after the pool has taken it back
        await answer_with(writer, chunked(SSE, b"data: [DONE]\n\n"))
        writer.close()

    async with engine(answer) as (served, pool):
        first = await pool.send("POST", served.url, [], BODY)
        await first.aread()
        first.close()
        await asyncio.sleep(0.3)  # a pause before the next request
        assert len(served.connections) == 2  # opened before anything was asked of it
        assert served.connections[1] == [] and not served.ended[1].is_set()
        again = await pool.send("POST", served.url, [], BODY)
        assert await again.aread() == SSE + b"data: [DONE]\n\n"
        again.close()
        assert [len(requests) for requests in served.connections[:2]] == [1, 1]
        assert (pool.retried, pool.failures) == (0, 0)


async def test_a_ready_connection_is_renewed_for_spare_for_s_then_none_is_kept(
    monkeypatch,
) -> None:
    """Each ready connection goes after KEEPALIVE_S like any idle one, and a new one takes
    its place until SPARE_FOR_S after the last request; then the pool holds nothing and
    opens nothing (an idle service does not wake). Here 0.2 s and 0.7 s."""
    monkeypatch.setattr(upstream_http, "KEEPALIVE_S", 0.2)
    monkeypatch.setattr(upstream_http, "SPARE_FOR_S", 0.7)

    async def answer(_c: int, _r: int, _rd: Any, writer: asyncio.StreamWriter) -> None:
        await answer_with(writer, closing(b"ok"))
        writer.close()

    async with engine(answer) as (served, pool):
        (await pool.send("POST", served.url, [], BODY)).close()
        await asyncio.sleep(1.2)
        opened = len(served.connections)
        assert 4 <= opened <= 6, opened  # the request's, then one every 0.2 s up to 0.7 s
        await asyncio.sleep(0.5)
        assert len(served.connections) == opened  # none after SPARE_FOR_S
        await asyncio.wait_for(asyncio.gather(*(e.wait() for e in served.ended)), 1.0)
        assert all(requests == [] for requests in served.connections[1:])
        assert (pool.retried, pool.failures) == (0, 0)


async def test_a_ready_connection_that_cannot_be_opened_is_no_failure() -> None:
    """The engine went away after its answer: the connection the pool opens ahead is
    refused, quietly (the next request finds out for itself, and counts it)."""

    async def answer(_c: int, _r: int, _rd: Any, writer: asyncio.StreamWriter) -> None:
        await answer_with(writer, closing(b"ok"))
        writer.close()

    port = free_port()
    served = Engine(answer, url=f"http://127.0.0.1:{port}/v1/chat/completions")
    server = await asyncio.start_server(served.handle, "127.0.0.1", port)
    pool = UpstreamPool()
    try:
        got = await pool.send("POST", served.url, [], BODY)
        server.close()  # listens no more: the connection opened ahead is refused
        got.close()
        await asyncio.sleep(0.3)
        assert (pool.failures, len(served.connections)) == (0, 1)
        with pytest.raises(UpstreamError, match="refused"):
            await pool.send("POST", served.url, [], BODY)
        assert pool.failures == 1
    finally:
        await pool.close()


async def test_a_ready_connection_the_engine_closes_unused_is_not_replaced_in_a_loop() -> None:
    """An engine that closes idle connections at once: the one opened ahead goes, and no
    other takes its place until a request's answer ends (else: a connect loop)."""
    accepted: list[int] = []

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        accepted.append(len(accepted))
        if len(accepted) == 1:
            await reader.readuntil(b"\r\n\r\n" + BODY)
            writer.write(closing(b"ok"))
            await writer.drain()
        writer.close()  # any later connection: closed before a request

    port = free_port()
    server = await asyncio.start_server(handle, "127.0.0.1", port)
    pool = UpstreamPool()
    try:
        got = await pool.send("POST", f"http://127.0.0.1:{port}/v1/x", [], BODY)
        assert await got.aread() == b"ok"
        got.close()
        await asyncio.sleep(0.5)
        assert len(accepted) == 2  # the request's, and one opened ahead that the engine closed
    finally:
        await pool.close()
        server.close()


async def test_a_ready_connection_closed_unused_leaves_no_unretrieved_error(monkeypatch) -> None:
    """A connection opened ahead and closed before any request went on it (let go after
    KEEPALIVE_S by the pool, or closed by the engine) had its answer's future fail with
    nobody to read it: asyncio reported "Future exception was never retrieved" when it was
    collected (a service log line every KEEPALIVE_S; a CI run's test failed on it)."""
    monkeypatch.setattr(upstream_http, "KEEPALIVE_S", 0.1)
    monkeypatch.setattr(upstream_http, "SPARE_FOR_S", 0.35)
    reported: list[dict[str, Any]] = []
    loop = asyncio.get_running_loop()
    loop.set_exception_handler(lambda _loop, context: reported.append(context))
    closed_unused = 0

    async def answer(c: int, _r: int, _rd: Any, writer: asyncio.StreamWriter) -> None:
        await answer_with(writer, closing(b"ok"))
        writer.close()

    try:
        async with engine(answer) as (served, pool):
            got = await pool.send("POST", served.url, [], BODY)
            assert await got.aread() == b"ok"
            got.close()
            await asyncio.sleep(0.7)  # spares opened and let go until SPARE_FOR_S
            closed_unused = len(served.connections) - 1
        gc.collect()
        await asyncio.sleep(0.05)
    finally:
        loop.set_exception_handler(None)
    assert closed_unused >= 2
    assert reported == []
