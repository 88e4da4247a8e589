"""Switch on request through the service's OpenAI endpoint: two real llama-server presets
from the test image (real Docker, different ports), launched and switched by the real
service, driven by the real `openai` client and raw httpx for the SSE bytes.

What a broken switch gets wrong: the request answered by the old engine (or refused), both
engines left running, a preset that does not fit started anyway (or the running engine
stopped before the refusal), a request during the switch sent to the dying engine, an
unbounded queue (or no Retry-After on the overflow), a stream left silent while it waits.
"""

from __future__ import annotations

import itertools
import json
import threading
import time

import httpx
import openai
import pytest

from tests.support.cli import run_cli, wait_for
from tests.support.endpoint_switching import (  # noqa: F401 - switching is a fixture
    FIXED,
    HI,
    RUNNING_MODEL,
    ServiceEvents,
    llama_metric,
    log_rows,
    running_presets,
    switching,
)
from tests.support.service_env import service_env  # noqa: F401 - a fixture
from tests.support.sse_lines import sse_lines

pytestmark = [pytest.mark.docker, pytest.mark.llama]


def test_a_request_for_another_preset_waits_for_the_switch_and_is_answered_by_it(
    switching, docker_client, scope
):
    ep = switching()
    assert running_presets(docker_client, scope) == ["sw-a"]
    started = time.monotonic()
    answer = ep["client"].chat.completions.create(
        model="sw-b", messages=HI, max_tokens=12, extra_body=FIXED
    )
    took = time.monotonic() - started
    print(f"switch on request: the request waited and was answered in {took:.2f} s")
    assert answer.usage.completion_tokens == 12
    assert running_presets(docker_client, scope) == ["sw-b"]  # A is gone, B answers
    # B's own counter saw the 12 tokens: the engine that answered is B's
    assert llama_metric(ep["ports"]["sw-b"], "llamacpp:tokens_predicted_total") == 12
    with pytest.raises(httpx.HTTPError):
        httpx.get(f"http://127.0.0.1:{ep['ports']['sw-a']}/health", timeout=2)
    row = wait_for(
        lambda: [r for r in log_rows(ep["data"]) if r["model"] == "sw-b"],
        timeout=5,
        what="the request logged",
    )[0]
    assert row["status"] == 200 and row["waited_s"] > 0.2
    assert row["engine"].startswith("sparkdeck-sw-b")  # the container that answered
    # the running model now goes straight through, with no wait
    again = ep["client"].chat.completions.create(
        model=RUNNING_MODEL, messages=HI, max_tokens=4, extra_body=FIXED
    )
    assert again.usage.completion_tokens == 4
    latest = wait_for(
        lambda: len(rows := log_rows(ep["data"])) >= 2 and rows[-1],
        timeout=5,
        what="the second request logged",
    )
    assert latest["waited_s"] is None and latest["status"] == 200


def test_switching_back_and_forth_each_request_is_answered_by_the_preset_it_named(
    switching, docker_client, scope
):
    ep = switching()
    waits = []
    for target in ("sw-b", "sw-a", "sw-b", "sw-a"):
        started = time.monotonic()
        answer = ep["client"].chat.completions.create(
            model=target, messages=HI, max_tokens=5, extra_body=FIXED
        )
        waits.append(time.monotonic() - started)
        assert answer.usage.completion_tokens == 5
        assert running_presets(docker_client, scope) == [target]
        # a fresh container each time: its counter starts at 0
        assert llama_metric(ep["ports"][target], "llamacpp:tokens_predicted_total") == 5
    print("switch waits (request sent -> answer):", [round(w, 2) for w in waits], "s")
    rows = wait_for(
        lambda: len(r := [x for x in log_rows(ep["data"]) if x["status"] == 200]) == 4 and r,
        timeout=5,
        what="four requests logged",
    )
    assert [r["engine"].split("-t")[0] for r in rows] == [
        "sparkdeck-sw-b",
        "sparkdeck-sw-a",
        "sparkdeck-sw-b",
        "sparkdeck-sw-a",
    ]


def test_with_no_engine_running_a_request_for_a_preset_starts_it(switching, docker_client, scope):
    ep = switching()
    stopped = run_cli("stop", env=ep["env"])
    assert stopped.returncode == 0, stopped.stderr
    assert running_presets(docker_client, scope) == []
    answer = ep["client"].chat.completions.create(
        model="sw-b", messages=HI, max_tokens=3, extra_body=FIXED
    )
    assert answer.usage.completion_tokens == 3
    assert running_presets(docker_client, scope) == ["sw-b"]
    assert llama_metric(ep["ports"]["sw-b"], "llamacpp:tokens_predicted_total") == 3


def test_a_preset_that_does_not_fit_is_refused_with_the_numbers_and_a_keeps_running(
    switching, docker_client, scope
):
    ep = switching()
    with pytest.raises(openai.ConflictError) as refused:
        ep["client"].chat.completions.create(model="sw-huge", messages=HI, max_tokens=4)
    body = refused.value.body
    assert body["code"] == "model_does_not_fit"
    assert "4000.00 GiB" in body["message"] or "4000" in body["message"]
    assert "MemAvailable:" in body["message"] and "verdict:" in body["message"]
    assert refused.value.response.headers["x-should-retry"] == "false"
    assert running_presets(docker_client, scope) == ["sw-a"]
    # a stream is refused the same way, with its status: no byte went out before the check
    with httpx.stream(
        "POST",
        ep["base"] + "/chat/completions",
        timeout=60,
        json={"model": "sw-huge", "messages": HI, "max_tokens": 4, "stream": True},
    ) as r:
        assert r.status_code == 409 and b"model_does_not_fit" in r.read()
    # and A still answers through the endpoint
    ok = ep["client"].chat.completions.create(
        model=RUNNING_MODEL, messages=HI, max_tokens=4, extra_body=FIXED
    )
    assert ok.usage.completion_tokens == 4


def test_with_switching_off_another_model_is_still_refused_naming_the_switch(
    switching, docker_client, scope
):
    ep = switching(switch_on_request=False)
    with pytest.raises(openai.NotFoundError) as refused:
        ep["client"].chat.completions.create(model="sw-b", messages=HI, max_tokens=4)
    assert "sparkdeck launch sw-b" in refused.value.body["message"]
    assert running_presets(docker_client, scope) == ["sw-a"]


def test_during_a_switch_one_request_queues_and_the_next_gets_503_with_retry_after(
    switching, docker_client, scope
):
    ep = switching(queue=1)
    opened = threading.Event()
    results: dict[str, object] = {}

    def first() -> None:  # starts the switch; its stream opens once the fit check passed
        with httpx.stream(
            "POST",
            ep["base"] + "/chat/completions",
            timeout=120,
            json={"model": "sw-b", "messages": HI, "max_tokens": 8, "stream": True, **FIXED},
        ) as r:
            lines = []
            for line in sse_lines(r):
                lines.append(line)
                opened.set()
            results["first"] = (r.status_code, lines)

    def second() -> None:  # names the running model: it still waits behind the switch
        results["second"] = ep["client"].chat.completions.create(
            model=RUNNING_MODEL, messages=HI, max_tokens=6, extra_body=FIXED
        )

    threads = [threading.Thread(target=first)]
    threads[0].start()
    assert opened.wait(30), "the switching stream never opened"
    threads.append(threading.Thread(target=second))
    threads[1].start()
    time.sleep(0.3)  # the second is queued (the switch takes seconds: measured below)
    third = httpx.post(
        ep["base"] + "/chat/completions",
        timeout=30,
        json={"model": RUNNING_MODEL, "messages": HI, "max_tokens": 4},
    )
    for thread in threads:
        thread.join(120)
    assert third.status_code == 503, third.text
    assert third.json()["error"]["code"] == "switch_queue_full"
    assert int(third.headers["retry-after"]) >= 1
    status, lines = results["first"]
    assert status == 200 and "data: [DONE]" in lines
    assert results["second"].usage.completion_tokens == 6  # answered, by the new engine
    assert running_presets(docker_client, scope) == ["sw-b"]
    assert llama_metric(ep["ports"]["sw-b"], "llamacpp:tokens_predicted_total") == 8 + 6
    rows = wait_for(
        lambda: len(r := log_rows(ep["data"])) >= 3 and r, timeout=5, what="three requests logged"
    )
    assert sorted(r["status"] for r in rows) == [200, 200, 503]
    assert all(r["waited_s"] > 0 for r in rows if r["status"] == 200)


def test_a_stream_waiting_for_the_switch_gets_keepalive_comments_before_its_first_token(switching):
    # keep-alives every 0.1 s here (the least settings.toml allows; 3 s by default): a
    # switch of the tiny model takes 0.5-2 s, so the default would show one comment, not
    # their rhythm (0.25 s gave only 2 in a 0.5 s switch in CI)
    ep = switching(loading_notice=True, keepalive_s=0.1)
    arrived: list[tuple[float, str]] = []
    started = time.monotonic()
    with httpx.stream(
        "POST",
        ep["base"] + "/chat/completions",
        timeout=120,
        json={"model": "sw-b", "messages": HI, "max_tokens": 8, "stream": True, **FIXED},
    ) as r:
        assert r.status_code == 200
        assert r.headers["content-type"].startswith("text/event-stream")
        for line in sse_lines(r):
            if line:
                arrived.append((time.monotonic() - started, line))
    comments = [(t, line) for t, line in arrived if line.startswith(":")]
    data = [
        json.loads(line[6:])
        for _, line in arrived
        if line.startswith("data: ") and line != "data: [DONE]"
    ]
    assert len(comments) >= 3 and all(line == ": loading sw-b" for _, line in comments)
    first_token = next(
        t
        for t, line in arrived
        if line.startswith("data: ") and "content" in line and "reasoning_content" not in line
    )
    assert comments[0][0] < first_token  # the client heard from the endpoint first
    gaps = [b[0] - a[0] for a, b in itertools.pairwise(comments)]
    # every keepalive_s, not a burst (an upper bound with room for a loaded event loop)
    assert all(0.08 < gap < 0.6 for gap in gaps), gaps
    # the opt-in visible line: a reasoning delta, before the engine's own chunks
    assert data[0]["choices"][0]["delta"] == {"reasoning_content": "loading sw-b…"}
    assert (
        sum(bool(c["choices"] and c["choices"][0]["delta"].get("content")) for c in data[1:]) >= 1
    )
    print(
        f"keep-alives at {[round(t, 2) for t, _ in comments]} s, first token at {first_token:.2f} s"
    )

    # the real openai client reads the same stream: the notice shows as a reasoning delta
    back = list(
        ep["client"].chat.completions.create(
            model="sw-a", messages=HI, max_tokens=6, stream=True, extra_body=FIXED
        )
    )
    notice = back[0].choices[0].delta.model_extra.get("reasoning_content")
    assert notice == "loading sw-a…"
    assert sum(bool(c.choices and c.choices[0].delta.content) for c in back) >= 1


def test_a_switch_that_fails_gives_the_launchs_error_and_a_stream_gets_it_in_stream(
    switching, docker_client, scope
):
    """B's host port held by another program (a real listening socket): the launch's
    preflight refuses, before A is stopped. The plain request gets 503 with that error; a
    stream, already opened with 200 while it waited, gets it as an error event, which the
    openai client raises."""
    import socket

    ep = switching()
    with socket.create_server(("127.0.0.1", ep["ports"]["sw-b"])):
        with pytest.raises(openai.InternalServerError) as failed:
            ep["client"].chat.completions.create(model="sw-b", messages=HI, max_tokens=4)
        body = failed.value.body
        assert body["code"] == "switch_failed"
        assert str(ep["ports"]["sw-b"]) in body["message"], body["message"]
        assert failed.value.response.headers["x-should-retry"] == "false"
        with pytest.raises(openai.APIError) as in_stream:
            for _ in ep["client"].chat.completions.create(
                model="sw-b", messages=HI, max_tokens=4, stream=True
            ):
                pass
        assert str(ep["ports"]["sw-b"]) in str(in_stream.value.message)
    assert running_presets(docker_client, scope) == ["sw-a"]


def test_bad_switch_settings_are_refused_naming_the_file_and_key(tmp_path):
    from sparkdeck.config.settings import SettingsError, load_settings

    path = tmp_path / "settings.toml"
    path.write_text(
        '[endpoint]\nswitch_on_request = "yes"\nqueue = -1\nkeepalive_s = 0\nmin_hold_s = -1\n'
    )
    with pytest.raises(SettingsError) as refused:
        load_settings(path)
    text = str(refused.value)
    for key in (
        "endpoint.switch_on_request",
        "endpoint.queue",
        "endpoint.keepalive_s",
        "endpoint.min_hold_s",
    ):
        assert key in text and str(path) in text
    path.write_text("[endpoint]\nswitch_on_request = true\nqueue = 0\n")
    loaded = load_settings(path).endpoint
    assert (
        loaded.switch_on_request,
        loaded.queue,
        loaded.loading_notice,
        loaded.keepalive_s,
        loaded.min_hold_s,
    ) == (True, 0, False, 3.0, 10.0)


def test_a_waiter_that_gives_up_frees_its_place_in_the_queue(switching):
    """queue = 1: a waiting client that times out (closes its connection) leaves the queue,
    so the next request waits in its place instead of getting 503."""
    ep = switching(queue=1)
    opened = threading.Event()
    done: dict[str, object] = {}

    def first() -> None:
        with httpx.stream(
            "POST",
            ep["base"] + "/chat/completions",
            timeout=120,
            json={"model": "sw-b", "messages": HI, "max_tokens": 4, "stream": True, **FIXED},
        ) as r:
            for _ in sse_lines(r):
                opened.set()
            done["first"] = r.status_code

    thread = threading.Thread(target=first)
    thread.start()
    assert opened.wait(30), "the switching stream never opened"
    with pytest.raises(httpx.ReadTimeout):  # it waits, then its client gives up
        httpx.post(
            ep["base"] + "/chat/completions",
            timeout=httpx.Timeout(5, read=0.15),
            json={"model": RUNNING_MODEL, "messages": HI, "max_tokens": 4},
        )
    time.sleep(0.1)  # the endpoint sees the closed connection
    third = httpx.post(
        ep["base"] + "/chat/completions",
        timeout=60,
        json={"model": RUNNING_MODEL, "messages": HI, "max_tokens": 4, **FIXED},
    )
    thread.join(60)
    assert third.status_code == 200, third.text  # not 503: the place was free again
    assert done["first"] == 200
    rows = wait_for(
        lambda: len(r := log_rows(ep["data"])) >= 3 and r, timeout=5, what="three requests logged"
    )
    gave_up = [r for r in rows if r["status"] == 499]
    assert len(gave_up) == 1 and "disconnected while waiting" in gave_up[0]["error"]
    # the third really queued behind the switch (had it ended already, it would not wait)
    assert [r["waited_s"] > 0 for r in rows if r["status"] == 200] == [True, True]


def test_a_request_during_a_switch_a_front_end_asked_for_waits_for_the_new_engine(
    switching, docker_client, scope
):
    """`sparkdeck launch sw-b` (a window's switch goes the same way): a request that arrives
    while the service runs that launch waits for it and is answered by sw-b, not by the
    engine being stopped and not with "no engine". Switching on request is off here: the
    queue behind a front end's launch does not depend on it."""
    from tests.support.service_env import client_for

    ep = switching(switch_on_request=False)
    launch = threading.Thread(
        target=lambda: results.update(
            cli=run_cli("launch", "sw-b", "--no-flush", "--yes", "--timeout", "60", env=ep["env"])
        )
    )
    results: dict[str, object] = {}
    with client_for(ep["env"]) as service:
        launch.start()
        wait_for(
            lambda: (service.status()["busy"] or "").startswith("a launch of sw-b"),
            timeout=30,
            what="the service running the launch",
            every=0.02,
        )
        answer = ep["client"].chat.completions.create(
            model=RUNNING_MODEL, messages=HI, max_tokens=7, extra_body=FIXED
        )
    launch.join(90)
    assert results["cli"].returncode == 0, results["cli"].stderr
    assert answer.usage.completion_tokens == 7
    assert running_presets(docker_client, scope) == ["sw-b"]
    assert llama_metric(ep["ports"]["sw-b"], "llamacpp:tokens_predicted_total") == 7
    row = wait_for(
        lambda: [r for r in log_rows(ep["data"]) if r["status"] == 200],
        timeout=5,
        what="the request logged",
    )[0]
    assert row["waited_s"] > 0 and row["engine"].startswith("sparkdeck-sw-b")


def test_a_stream_waiting_for_a_switch_ends_its_wait_when_the_switch_ends(switching):
    """keepalive_s at its default (3 s): a stream that waits for a switch gets its answer
    when the new engine is ready, not at the next keep-alive tick. Each request's wait
    (the request log's waited_s) is judged against that switch's own time, as the service
    published it: the endpoint's `endpoint-switch` event (its plan to the new engine
    reached), or, from a service that publishes none (the code before it), the launch's
    first event to its launch-result, which is shorter and so no looser: within 0.5 s."""
    ep = switching()
    events = ServiceEvents(ep["env"])
    targets = ("sw-b", "sw-a", "sw-b", "sw-a")
    try:
        for target in targets:
            with httpx.stream(
                "POST",
                ep["base"] + "/chat/completions",
                timeout=120,
                json={"model": target, "messages": HI, "max_tokens": 4, "stream": True, **FIXED},
            ) as r:
                lines = list(sse_lines(r))
            assert r.status_code == 200 and "data: [DONE]" in lines, lines
            assert not any('"error"' in line for line in lines), lines
        launches = wait_for(
            lambda: len(x := events.launches()) >= len(targets) and x,
            timeout=10,
            what=f"the four launches' events in {events.kinds()}",
        )
        switches = events.endpoint_switches()
    finally:
        events.close()
    rows = wait_for(
        lambda: len(r := [x for x in log_rows(ep["data"]) if x["stream"]]) >= len(targets) and r,
        timeout=5,
        what="four streams logged",
    )
    assert [x["preset"] for x in launches] == list(targets)
    assert all(x["ok"] for x in launches) and all(r["status"] == 200 for r in rows)
    if switches:
        assert [(x["preset"], x["ok"]) for x in switches] == [(t, True) for t in targets]
        took = [x["took_s"] for x in switches]
    else:
        took = [round(x["ended"] - x["began"], 3) for x in launches]
    figures = [(r["waited_s"], t) for r, t in zip(rows, took, strict=True)]
    print(
        "stream waits against the switches' own times (s):",
        figures,
        "launches took",
        [round(x["ended"] - x["began"], 3) for x in launches],
    )
    for waited, switch in figures:
        assert switch <= waited <= switch + 0.5, figures
