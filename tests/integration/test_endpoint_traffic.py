"""The endpoint under the traffic a home lab sends, in front of the real llama-server.

The engine is the tiny llama-server test image run as a container of this test's own (not a
sparkdeck engine: no sparkdeck label), attached by URL (`sparkdeck attach`), with the real
service and its endpoint in front of it (real Docker, real HTTP on loopback).

What a broken endpoint gets wrong here:
- 502s the engine never sent: its upstream pool reuses a keep-alive connection the engine
  already closed (llama-server closes one after 5 s idle, or after 100 requests) and fails
  the request instead of sending it again on a fresh connection (issue 30, item 1).
- A request after a pause pays for finding the engine again (a health probe on the request
  path once the last answer was a second old: +25 ms), where it should read what the owner
  last pushed (issue 30, item 4): a detach and an attach, and an engine that went away,
  still reach the endpoint. That nothing is asked on the path is counted in
  test_endpoint_finder.py; the TTFT promise (2 ms) is timed here after 2 s pauses (a person
  typing between requests), and for a kept-alive client's requests one after another
  (Nagle's algorithm left on by the endpoint made those wait 40 ms for the client's delayed
  ACK). Pauses of 0.5 and 10 s and the side-by-side with LiteLLM are
  benchmarks/endpoint_load.py's (docs/performance.md).
"""

from __future__ import annotations

import asyncio
import json
import os
import statistics
import time
from collections.abc import Iterator
from typing import Any

import aiohttp
import httpx
import pytest

from tests.conftest import free_port
from tests.support.cli import run_cli, wait_for
from tests.support.cpu_placement import pin
from tests.support.endpoint_service import log_rows

pytestmark = [pytest.mark.docker, pytest.mark.llama]
MODEL = "/models/tiny.gguf"  # llama-server's model id: the -m path
CHAT = {"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}
STREAM = {**CHAT, "max_tokens": 64, "stream": True}


@pytest.fixture
def attached_llama(isolated_dirs, docker_client, llama_image, scope) -> Iterator[dict[str, Any]]:
    """A llama-server container of this test's own, attached; the service's endpoint in
    front of it: {"direct": engine URL, "through": endpoint URL, "env": the CLI's env}."""
    engine_port, endpoint_port = free_port(), free_port()
    # -t 1: one compute thread, so the engine leaves a core to the service and the client
    container = docker_client.containers.run(
        llama_image,
        [
            "-m",
            MODEL,
            "--host",
            "0.0.0.0",
            "--port",
            "8080",
            "-c",
            "4096",
            "-np",
            "4",
            "-ngl",
            "0",
            "-t",
            "1",
            "-tb",
            "1",
        ],
        detach=True,
        init=True,
        ports={"8080/tcp": ("127.0.0.1", engine_port)},
        labels={"io.sparkdeck.test-traffic": scope},
    )  # not sparkdeck's: an outside engine
    env = {
        **os.environ,
        "SPARKDECK_SCOPE": scope,
        "SPARKDECK_SERVICE": "auto",
        "SPARKDECK_ENDPOINT_PORT": str(endpoint_port),
    }
    direct, through = f"http://127.0.0.1:{engine_port}", f"http://127.0.0.1:{endpoint_port}"
    try:
        wait_for(lambda: _answers(direct + "/health"), timeout=60, what="llama-server's health")
        attached = run_cli("attach", direct, "--name", "tiny-llama", env=env)
        assert attached.returncode == 0, attached.stderr
        started = run_cli("service", "start", env=env)
        assert started.returncode == 0, started.stderr
        wait_for(
            lambda: _posts(through),
            timeout=30,
            every=0.3,
            what="the endpoint answering through the attached llama-server",
        )
        yield {
            "direct": direct,
            "through": through,
            "env": env,
            "data": isolated_dirs["data"],
            "container": container,
        }
    finally:
        run_cli("service", "stop", env=env)
        container.remove(force=True)


def _answers(url: str) -> bool:
    try:
        return httpx.get(url, timeout=5).status_code == 200
    except httpx.HTTPError:
        return False


def _posts(base: str) -> bool:
    try:
        return httpx.post(base + "/v1/chat/completions", json=CHAT, timeout=10).status_code == 200
    except httpx.HTTPError:
        return False


async def fresh_connection_load(base: str, requests: int, concurrent: int) -> dict[Any, int]:
    """`requests` streamed chat requests, `concurrent` at a time, each on a new connection
    (what curl in a loop, or a client that reconnects, sends): {status or error: count}.
    Streamed: llama-server closes a connection after each streamed answer (though the answer
    says keep-alive), the race a pool loses; 64 tokens keep 50 streams in flight at once."""
    outcomes: dict[Any, int] = {}
    gate = asyncio.Semaphore(concurrent)
    connector = aiohttp.TCPConnector(force_close=True, limit=0)  # a new connection each
    async with aiohttp.ClientSession(connector=connector) as session:

        async def one() -> None:
            async with gate:
                try:
                    async with session.post(
                        base + "/v1/chat/completions",
                        json=STREAM,
                        timeout=aiohttp.ClientTimeout(total=60),
                    ) as answer:
                        await answer.read()
                        outcome: Any = answer.status
                except (aiohttp.ClientError, TimeoutError) as exc:
                    outcome = type(exc).__name__
                outcomes[outcome] = outcomes.get(outcome, 0) + 1

        await asyncio.gather(*(one() for _ in range(requests)))
    return outcomes


@pytest.mark.anyio
async def test_500_fresh_connection_requests_at_50_concurrent_get_no_502(attached_llama):
    # the load twice, 6 s apart: the second round starts on a pool whose connections the
    # engine closed after its 5 s keep-alive
    rounds = []
    for pause in (0.0, 6.0):
        time.sleep(pause)
        rounds.append(await fresh_connection_load(attached_llama["through"], 500, 50))
    failed = [row for row in log_rows(attached_llama["data"]) if row.get("status") == 502]
    assert all(outcome == {200: 500} for outcome in rounds), (
        f"through the endpoint: {rounds}; the request log's 502s: {failed[:3]}; "
        f"{_engine_now(attached_llama)}"
    )
    # the engine itself answers the same load in full (it sends no 502 of its own)
    assert await fresh_connection_load(attached_llama["direct"], 500, 50) == {200: 500}


def _engine_now(attached: dict[str, Any]) -> str:
    """What the engine itself says right after a failed round: whether it still answers a
    chat directly, and its container's state (run 27 had 50 requests time out at once with
    no 502 logged, and nothing said whether the engine or the endpoint had stopped)."""
    try:
        direct: Any = httpx.post(attached["direct"] + "/v1/chat/completions", json=CHAT, timeout=10)
        direct = direct.status_code
    except httpx.HTTPError as exc:
        direct = type(exc).__name__
    container = attached["container"]
    container.reload()
    state = {k: container.attrs["State"].get(k) for k in ("Status", "Paused", "OOMKilled", "Pid")}
    return f"the engine asked directly: {direct}; its container: {state}"


def _first_event_s(client: httpx.Client, base: str) -> tuple[float, Any]:
    """A streamed request's time to its first event (s), and the connection it went on."""
    sent, first = time.perf_counter(), None
    with client.stream("POST", base + "/v1/chat/completions", json=STREAM) as answer:
        assert answer.status_code == 200, answer.read()
        for line in answer.iter_lines():  # read to the end: the connection is then reused
            if first is None and line.startswith("data:"):
                first = time.perf_counter() - sent
        connection = answer.extensions["network_stream"]
    assert first is not None, f"{base}: a stream without one event"
    return first, connection


def test_a_kept_alive_client_gets_each_first_token_within_2_ms_of_direct(attached_llama):
    """A client that keeps its connection to the endpoint open (httpx, the openai library
    and LiteLLM's own client all do) sends streamed requests one after another: each first
    token comes within the 2 ms promise of the engine's own. With Nagle's algorithm left on
    by the endpoint, every answer after the first waited for the client's delayed ACK before
    its first token: +40 ms on Linux. Direct requests go on a new connection each (the
    engine closes one after every streamed answer anyway)."""
    through, direct = [], []
    with httpx.Client(timeout=30) as kept:
        _, connection = _first_event_s(kept, attached_llama["through"])
        for _ in range(25):
            with httpx.Client(timeout=30) as fresh:
                direct.append(_first_event_s(fresh, attached_llama["direct"])[0])
            ttft, again = _first_event_s(kept, attached_llama["through"])
            assert again is connection, "the client's connection to the endpoint was not kept"
            through.append(ttft)
    # each request against the direct one just before it: the pairs share the host's load
    added_ms = statistics.median(t - d for t, d in zip(through, direct, strict=True)) * 1000
    assert added_ms <= 2.0, (
        f"the endpoint added {added_ms:.2f} ms at the median; through "
        f"{sorted(round(t * 1000, 2) for t in through)} ms, direct "
        f"{sorted(round(t * 1000, 2) for t in direct)} ms"
    )


def test_a_request_after_a_2_s_pause_adds_at_most_2_ms_ttft(attached_llama):
    """A person types between requests: each comes after seconds of quiet, on the chat UI's
    kept-alive connection, and its first token comes within the 2 ms promise of the
    engine's own. The endpoint once probed the engine's health on the request path after a
    pause (+25 ms), and once left Nagle's algorithm on (a kept-alive answer waited for the
    client's delayed ACK)."""
    # placed as endpoint_overhead.py measures the 2 ms promise: on a Spark the engine
    # decodes on the GPU, never on the service's cores; here the engine computes on the
    # first CPU and the service runs on the others. On two CPUs this client shares one, the
    # engine's: its own work after each send delays whoever shares its CPU, which beside the
    # service is the through requests only (+2.06-2.11 ms in 3 of 3 runs, against +1.0-1.6
    # beside the engine, 2026-12-04), beside the engine both ways alike
    cpus = sorted(os.sched_getaffinity(0))
    mine = set(cpus)
    if len(cpus) > 1:
        attached_llama["container"].update(cpuset_cpus=str(cpus[0]))
        status = run_cli("service", "status", "--json", env=attached_llama["env"])
        pin(json.loads(status.stdout)["pid"], set(cpus[1:] if len(cpus) == 2 else cpus[1:-1]))
        os.sched_setaffinity(0, {cpus[0]} if len(cpus) == 2 else {cpus[-1]})
    through, direct = [], []
    try:
        with httpx.Client(timeout=30) as kept:
            _first_event_s(kept, attached_llama["through"])  # the connection and the slot warm
            for i in range(10):
                # 2 s of quiet, then one request each way, taking turns at going first: the
                # kept-alive connection (client to endpoint, endpoint to engine) has been idle
                # 2 s or more before every request through, whichever goes first
                time.sleep(2.0)
                for way in ("direct", "through") if i % 2 else ("through", "direct"):
                    if way == "through":
                        through.append(_first_event_s(kept, attached_llama["through"])[0])
                    else:
                        with httpx.Client(timeout=30) as fresh:
                            direct.append(_first_event_s(fresh, attached_llama["direct"])[0])
    finally:
        os.sched_setaffinity(0, mine)
    # judged on the pairs: a moment when other work on the host slows both is compared with
    # itself, not with a quiet moment of the other way. The first request after the quiet
    # is slower whichever way it goes (the engine woke: +1.3-1.6 ms through first, -1.1 to
    # -1.3 ms direct first, 2026-12-05), so each order's median counts half: that cancels
    added = [t - d for t, d in zip(through, direct, strict=True)]
    added_ms = (statistics.median(added[0::2]) + statistics.median(added[1::2])) / 2 * 1000
    assert added_ms <= 2.0, (
        f"after 2 s pauses the endpoint added {added_ms:.2f} ms (the mean of the two orders' "
        f"medians); through {[round(t * 1000, 2) for t in through]} ms, direct "
        f"{[round(t * 1000, 2) for t in direct]} ms, through first at the even places"
    )


def test_a_detach_and_an_attach_reach_the_endpoint_without_a_restart(attached_llama):
    """The endpoint's engine is pushed, not re-asked: a change of the attached registry
    (detach, attach again) still reaches the next request."""
    env, through = attached_llama["env"], attached_llama["through"]
    assert run_cli("detach", "tiny-llama", env=env).returncode == 0
    refused = httpx.post(through + "/v1/chat/completions", json=CHAT, timeout=10)
    assert refused.status_code == 503, refused.text
    assert (
        run_cli("attach", attached_llama["direct"], "--name", "tiny-llama", env=env).returncode == 0
    )
    answered = httpx.post(through + "/v1/chat/completions", json=CHAT, timeout=10)
    assert answered.status_code == 200, answered.text


def test_an_engine_that_went_away_is_a_503_naming_it_not_a_stale_route(attached_llama):
    """A pushed engine that stops answering: one request finds it gone (502: the engine did
    not answer), and the next is told no engine answers (503), not sent into the void."""
    attached_llama["container"].stop(timeout=5)
    first = httpx.post(attached_llama["through"] + "/v1/chat/completions", json=CHAT, timeout=10)
    assert first.status_code in (502, 503), first.text
    second = httpx.post(attached_llama["through"] + "/v1/chat/completions", json=CHAT, timeout=10)
    assert second.status_code == 503, second.text
    assert "tiny-llama" in second.json()["error"]["message"]
