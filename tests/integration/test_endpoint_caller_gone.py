"""A caller that hangs up before the engine began its answer ends its request there: the real
service and its endpoint in front of an attached stand-in that holds each request unanswered
(as an engine in a long prefill, or one that hangs), over real loopback HTTP.

What a broken endpoint gets wrong: only the relay of an answer watched the caller. A caller
gone while the engine had not begun kept its request waiting on the engine for as long as
the engine took, holding one of the engine's connections (and its place in the engine's
queue, since the engine learns of a gone client only from its connection closing); and a
service with such requests open could not stop within `service stop`'s 10 s.
"""

from __future__ import annotations

import socket
import time

import pytest

from tests.support.cli import run_cli, wait_for
from tests.support.endpoint_service import (  # noqa: F401 - endpoint: a fixture
    A_CHAT,
    CHAT_PATH,
    ask,
    endpoint,
    log_rows,
)
from tests.support.service_env import service_env  # noqa: F401 - a fixture

pytestmark = pytest.mark.docker  # the service follows Docker (the engine is attached)
HUNG_UP_S = 1.0  # the engine's connection closes within this of the caller's hanging up


def test_a_caller_that_hangs_up_before_the_answer_begins_frees_the_engine_at_once(endpoint):
    engine, port = endpoint["engine"], endpoint["port"]
    engine.hold = True
    before = len(engine.received)
    caller = socket.create_connection(("127.0.0.1", port))
    host, client_port = caller.getsockname()[:2]
    caller.sendall(
        f"POST {CHAT_PATH} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(A_CHAT)}\r\n\r\n".encode()
        + A_CHAT
    )
    wait_for(lambda: len(engine.received) > before, timeout=10, what="the request at the engine")
    time.sleep(0.5)  # the engine holds it, as a long prefill would
    assert not engine.dropped
    hung_up = time.monotonic()
    caller.close()
    wait_for(lambda: engine.dropped, timeout=5, what="the engine's connection to close")
    took = engine.dropped[0] - hung_up
    assert took < HUNG_UP_S, f"the engine's connection closed {took:.2f} s after the caller's"

    # one request-log line for it: 499, the caller gone before the engine answered
    client = f"{host}:{client_port}"
    wait_for(
        lambda: any(row["client"] == client for row in log_rows(endpoint["data"])),
        timeout=10,
        what="the request's log line",
    )
    time.sleep(0.3)  # a second line would come as quickly
    (row,) = [row for row in log_rows(endpoint["data"]) if row["client"] == client]
    assert row["status"] == 499, row
    assert row["error"] == "the client disconnected before the engine sink began its answer"

    # the endpoint goes on: the next request is answered, and the service stops at once
    engine.hold = False
    assert ask(port, "POST", CHAT_PATH, A_CHAT).status == 200
    stopping = time.monotonic()
    stopped = run_cli("service", "stop", env=endpoint["env"])
    assert stopped.returncode == 0, stopped.stderr
    assert time.monotonic() - stopping < 5.0
