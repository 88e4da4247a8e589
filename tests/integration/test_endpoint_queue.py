"""The endpoint's queue under traffic on two models: clients alternating two real
llama-server presets (real Docker, the real service, switch_on_request = true), and
requests that arrive while `sparkdeck launch` (the real CLI) runs.

What a broken scheduler gets wrong: a request for the preset that does not run refused
with 404 while a switch could serve it, a request sent to the engine of the other model, a
switch that cuts off replies in flight (an error inside a 200 stream), a switch sooner than
`min_hold_s` after the last one, a request refused with 409 because a front end's launch
runs instead of waiting for it.
"""

from __future__ import annotations

import itertools
import json
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest

from tests.support.cli import run_cli, wait_for
from tests.support.endpoint_switching import (  # noqa: F401 - switching is a fixture
    FIXED,
    HI,
    RUNNING_MODEL,
    ServiceEvents,
    log_rows,
    running_presets,
    switching,
)
from tests.support.service_env import service_env  # noqa: F401 - a fixture
from tests.support.sse_lines import sse_lines

pytestmark = [pytest.mark.docker, pytest.mark.llama]


def ask(base: str, model: str | None, tokens: int) -> tuple[int, dict]:
    body = {
        "messages": HI,
        "max_tokens": tokens,
        **FIXED,
        **({"model": model} if model is not None else {}),
    }
    answer = httpx.post(base + "/chat/completions", json=body, timeout=120)
    return answer.status_code, answer.json()


def ask_stream(base: str, model: str, tokens: int) -> tuple[int, list[str]]:
    with httpx.stream(
        "POST",
        base + "/chat/completions",
        timeout=120,
        json={
            "model": model,
            "messages": HI,
            "max_tokens": tokens,
            "stream": True,
            "stream_options": {"include_usage": True},
            **FIXED,
        },
    ) as r:
        return r.status_code, [line for line in sse_lines(r) if line.startswith("data: ")]


def served_by_their_model(data, count: int) -> list[dict]:
    """The request log once `count` requests are in: each answered 200 by the engine of
    the preset it named (the container's name carries the preset)."""
    rows = wait_for(
        lambda: len(r := log_rows(data)) >= count and r, timeout=10, what=f"{count} requests logged"
    )
    assert sorted(r["status"] for r in rows) == [200] * count, [
        (r["model"], r["status"], r["error"]) for r in rows
    ]
    for row in rows:
        assert row["engine"].startswith(f"sparkdeck-{row['model']}-"), row
    return rows


def test_concurrent_requests_alternating_two_presets_are_all_answered_by_their_model(switching):
    count = 8
    ep = switching(min_hold_s=2.0)
    models = ["sw-a" if i % 2 else "sw-b" for i in range(count)]
    with ThreadPoolExecutor(count) as pool:
        answers = list(pool.map(lambda m: ask(ep["base"], m, 6), models))
    print("statuses:", [status for status, _ in answers])
    assert [status for status, _ in answers] == [200] * count, answers
    assert all(body["usage"]["completion_tokens"] == 6 for _, body in answers)
    served_by_their_model(ep["data"], count)


def test_twenty_concurrent_streams_alternating_two_presets_all_stream_their_answer(switching):
    # the default queue (64) holds twenty clients at once, nineteen of them waiting
    ep = switching(min_hold_s=2.0)
    models = ["sw-a" if i % 2 else "sw-b" for i in range(20)]
    with ThreadPoolExecutor(20) as pool:
        answers = list(pool.map(lambda m: ask_stream(ep["base"], m, 8), models))
    print("statuses:", [status for status, _ in answers])
    assert [status for status, _ in answers] == [200] * 20
    for _, lines in answers:
        assert lines[-1] == "data: [DONE]" and not any('"error"' in x for x in lines), lines
        usage = [json.loads(x[6:])["usage"] for x in lines[:-1] if json.loads(x[6:]).get("usage")]
        assert usage and usage[-1]["completion_tokens"] == 8, lines
    served_by_their_model(ep["data"], 20)


def test_two_clients_on_two_models_take_turns_no_sooner_than_min_hold_s(switching):
    """Two clients, each asking its own model three times in a row: every request is
    answered by its model, and no switch starts sooner than min_hold_s after the one
    before it ended (the service's own launch events)."""
    hold = 3.0
    ep = switching(min_hold_s=hold)
    events = ServiceEvents(ep["env"])
    statuses: dict[str, list[int]] = {"sw-a": [], "sw-b": []}

    def client(model: str) -> None:
        for _ in range(3):
            statuses[model].append(ask(ep["base"], model, 4)[0])

    try:
        threads = [threading.Thread(target=client, args=(m,)) for m in ("sw-b", "sw-a")]
        for thread in threads:
            thread.start()
            time.sleep(0.05)  # sw-b first: its request is the queue's first switch
        for thread in threads:
            thread.join(180)
        launches = events.launches()
    finally:
        events.close()
    assert statuses == {"sw-a": [200] * 3, "sw-b": [200] * 3}
    served_by_their_model(ep["data"], 6)
    gaps = [round(b["began"] - a["ended"], 2) for a, b in itertools.pairwise(launches)]
    print(f"{len(launches)} switches: {[x['preset'] for x in launches]}; gaps {gaps} s")
    assert launches and launches[0]["preset"] == "sw-b"
    assert all(gap >= hold for gap in gaps), gaps
    # three requests each, two models, one switch to B and one back: the hold batched them
    assert len(launches) <= 2, launches


def test_requests_during_a_cli_launch_wait_for_it_and_are_served_not_refused(
    switching, docker_client, scope
):
    """`sparkdeck launch sw-b` from the real CLI while requests arrive, switching on
    request on: requests for sw-b, for no model and for the model both presets serve wait
    for that launch and are answered by sw-b; one for sw-a waits its turn after it (one
    more entry in the same queue) and is answered by sw-a."""
    from tests.support.service_env import client_for

    ep = switching(min_hold_s=1.0)
    results: dict[str, object] = {}
    launch = threading.Thread(
        target=lambda: results.update(
            cli=run_cli("launch", "sw-b", "--no-flush", "--yes", "--timeout", "60", env=ep["env"])
        )
    )
    asked = [("sw-b", 5), (None, 6), (RUNNING_MODEL, 7), ("sw-b", 8), ("sw-a", 9)]
    with client_for(ep["env"]) as service:
        launch.start()
        wait_for(
            lambda: (service.status()["busy"] or "").startswith("a launch of sw-b"),
            timeout=30,
            what="the service running the launch",
            every=0.02,
        )
        with ThreadPoolExecutor(len(asked)) as pool:
            answers = list(pool.map(lambda a: ask(ep["base"], *a), asked))
    launch.join(90)
    assert results["cli"].returncode == 0, results["cli"].stderr
    print("statuses during the CLI launch:", [status for status, _ in answers])
    assert [status for status, _ in answers] == [200] * len(asked), answers
    assert [body["usage"]["completion_tokens"] for _, body in answers] == [
        tokens for _, tokens in asked
    ]
    rows = wait_for(
        lambda: len(r := log_rows(ep["data"])) >= len(asked) and r,
        timeout=10,
        what="the requests logged",
    )
    engine = {row["output_tokens"]: row["engine"].split("-t")[0] for row in rows}
    assert engine == {
        5: "sparkdeck-sw-b",
        6: "sparkdeck-sw-b",
        7: "sparkdeck-sw-b",
        8: "sparkdeck-sw-b",
        9: "sparkdeck-sw-a",
    }, engine
    assert all(row["waited_s"] > 0 for row in rows)  # each queued, none refused
    assert running_presets(docker_client, scope) == ["sw-a"]
