"""Who gets in, and every refusal leaves a trace (issue 26): the real service and its
endpoint, with a key, in front of an attached engine stand-in on loopback.

What a broken endpoint gets wrong: a refusal that writes no request-log line (a wrong key,
an unknown path, a wrong method: exactly the requests of someone probing), or two lines; a
lower-case `bearer` refused although RFC 7235 makes the scheme case-insensitive; Starlette's
plain-text 404/405 instead of OpenAI's error shape; a Content-Length past the limit read
anyway before the 413; loopback left open to every local user when the owner asked for a
key; `sparkdeck endpoint` naming only the 127.0.0.1 URL of an endpoint listening on
0.0.0.0, or saying nothing about who can reach it and switch its engine.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator

import pytest

from tests.conftest import free_port, llama_preset_fields, write_preset
from tests.support.cli import run_cli, wait_for
from tests.support.endpoint_service import (
    MODEL,
    ask,
    log_rows,
    rows_of,
    sink_engine,
    write_settings,
)
from tests.support.service_env import service_env  # noqa: F401 - a fixture

pytestmark = pytest.mark.docker  # the service follows Docker (the engine is attached)
KEY = "k3y-for-the-test"
CHAT = "/v1/chat/completions"


def chat(model: str = MODEL) -> bytes:
    return json.dumps({"model": model, "messages": [{"role": "user", "content": "hi"}]}).encode()


@pytest.fixture
def keyed(service_env, isolated_dirs) -> Iterator[Callable[[], dict]]:
    """The service with a key on loopback and switch_on_request, no engine yet; `attach()`
    attaches the stand-in and waits until the endpoint forwards to it."""
    port = free_port()
    env = {**service_env, "SPARKDECK_ENDPOINT_PORT": str(port), "EP_TEST_KEY": KEY}
    write_settings(
        isolated_dirs["config"], {"api_key_env": "EP_TEST_KEY", "switch_on_request": True}
    )
    # a preset whose stated claim (4000 GiB) never fits: asking for it is the 409
    write_preset(
        isolated_dirs["config"] / "presets",
        "rf-huge",
        **llama_preset_fields(
            "sparkdeck-test/none:0",
            free_port(),
            llamacpp={
                "context": 2048,
                "gpu_layers": 0,
                "parallel": 2,
                "memory_gib": 4000.0,
                "no_mmap_flag": ["--load-mode", "none"],
            },
        ),
    )
    with sink_engine() as engine:
        url = f"http://127.0.0.1:{engine.server_address[1]}"

        def attach() -> list:
            """The requests sent until one went through (each is a log line too)."""
            attached = run_cli("attach", url, "--name", "sink", env=env)
            assert attached.returncode == 0, attached.stderr
            polls: list = []
            wait_for(
                lambda: (
                    polls.append(
                        ask(port, "POST", CHAT, chat(), {"Authorization": f"Bearer {KEY}"})
                    )
                    or polls[-1].status == 200
                ),
                timeout=30,
                every=0.3,
                what="the endpoint forwarding to the attached stand-in",
            )
            return polls

        started = run_cli("service", "start", env=env)
        assert started.returncode == 0, started.stderr
        yield {
            "port": port,
            "env": env,
            "data": isolated_dirs["data"],
            "attach": attach,
            "engine": engine,
        }


def test_every_refusal_is_one_request_log_line_with_its_status_and_reason(keyed):
    port, auth = keyed["port"], {"Authorization": f"Bearer {KEY}"}
    answers = [("no engine", 503, "no_engine", ask(port, "POST", CHAT, chat(), auth))]
    polls = keyed["attach"]()
    answers += [
        (
            "wrong key",
            401,
            "invalid_api_key",
            ask(port, "POST", CHAT, chat(), {"Authorization": "Bearer wrong"}),
        ),
        ("no key", 401, "invalid_api_key", ask(port, "GET", "/v1/models")),
        (
            "another scheme",
            401,
            "invalid_api_key",
            ask(port, "POST", CHAT, chat(), {"Authorization": f"Basic {KEY}"}),
        ),
        ("unknown path", 404, "unknown_url", ask(port, "GET", "/v1/nothing", headers=auth)),
        ("wrong method", 405, "method_not_allowed", ask(port, "GET", CHAT, headers=auth)),
        ("not JSON", 400, "invalid_json", ask(port, "POST", CHAT, b"{model: ", auth)),
        ("another model", 404, "model_not_found", ask(port, "POST", CHAT, chat("nope"), auth)),
        ("does not fit", 409, "model_does_not_fit", ask(port, "POST", CHAT, chat("rf-huge"), auth)),
    ]
    # announced past the limit: refused from the headers, before a byte of the body (the
    # client sends none; an endpoint that reads first would wait here until the timeout)
    sent = time.monotonic()
    answers.append(
        (
            "announced too large",
            413,
            "request_too_large",
            ask(port, "POST", CHAT, None, {**auth, "Content-Length": str(65 * 2**20)}, timeout=10),
        )
    )
    assert time.monotonic() - sent < 5

    for what, status, code, answer in answers:
        assert answer.status == status, (what, answer)
        assert answer.error["code"] == code and answer.error["type"] and answer.error["message"], (
            what,
            answer.body,
        )  # OpenAI's shape, not plain text
    assert answers[5][3].headers.get("allow") == "POST"  # the 405 says what the path takes
    assert KEY not in json.dumps([a.body for *_, a in answers])

    def logged() -> bool:
        return all(rows_of(keyed["data"], answer) for *_, answer in answers)

    wait_for(logged, timeout=5, what="a request-log line for every refusal")
    time.sleep(0.5)  # a second line would be written off the loop just as quickly
    for what, status, _code, answer in answers:
        (row,) = rows_of(keyed["data"], answer)  # exactly one line each
        assert row["status"] == status and row["error"] == answer.error["message"], what
    # nothing else was logged: the lines are these requests' and the polls' until attached
    assert len(log_rows(keyed["data"])) == len(answers) + len(polls)
    assert KEY not in (keyed["data"] / "requests.jsonl").read_text()


def test_the_bearer_scheme_is_matched_without_regard_to_case(keyed):
    keyed["attach"]()
    received = len(keyed["engine"].received)
    for scheme in ("bearer", "BEARER", "bEaReR"):
        answer = ask(keyed["port"], "POST", CHAT, chat(), {"Authorization": f"{scheme} {KEY}"})
        assert answer.status == 200, (scheme, answer)
        assert answer.body["choices"][0]["message"]["content"] == "ok"  # the engine's answer
    assert len(keyed["engine"].received) == received + 3
    # the key itself is still compared exactly
    assert (
        ask(keyed["port"], "POST", CHAT, chat(), {"Authorization": f"bearer {KEY.upper()}"}).status
        == 401
    )


def test_require_key_on_loopback_refuses_to_start_without_a_key(isolated_dirs):
    write_settings(
        isolated_dirs["config"], {"require_key_on_loopback": True, "api_key_env": "EP_LOOPBACK_KEY"}
    )
    env = {k: v for k, v in os.environ.items() if k != "EP_LOOPBACK_KEY"}
    done = subprocess.run(
        [sys.executable, "-m", "sparkdeck", "service", "run"],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    assert done.returncode == 2, done.stderr
    assert "EP_LOOPBACK_KEY" in done.stderr and "require_key_on_loopback" in done.stderr
    assert "will not start" in done.stderr


def _endpoint(env: dict[str, str], *args: str) -> str:
    shown = run_cli("endpoint", *args, env=env, timeout=60)
    assert shown.returncode == 0, shown.stderr
    return shown.stdout


def test_endpoint_says_who_can_reach_it_and_the_address_it_listens_on(isolated_dirs):
    port = free_port()
    base = {**os.environ, "SPARKDECK_ENDPOINT_PORT": str(port)}
    write_settings(isolated_dirs["config"], {"host": "0.0.0.0", "api_key_env": "EP_KEY"})
    lan = {**base, "EP_KEY": KEY}
    text = _endpoint(lan)
    assert f"listens on    0.0.0.0:{port}" in text
    assert "the network" in text and KEY not in text
    shown = json.loads(_endpoint(lan, "--json"))
    assert shown["listens"] == f"0.0.0.0:{port}" and shown["lan"] is True
    assert "network" in shown["reachable_by"]

    write_settings(isolated_dirs["config"], {"switch_on_request": True})
    local = {k: v for k, v in base.items() if k != "SPARKDECK_API_KEY"}
    text = _endpoint(local)
    assert f"listens on    127.0.0.1:{port}" in text
    assert "every user of this machine" in text
    # the engine can be switched by anyone here, and the text says how to close that
    switching = next(line for line in text.splitlines() if line.startswith("switching"))
    assert "any local process" in switching
    assert "SPARKDECK_API_KEY" in text and "require_key_on_loopback" in text
    shown = json.loads(_endpoint(local, "--json"))
    assert shown["lan"] is False and shown["anyone_local_can_switch"] is True
    assert shown["listens"] == f"127.0.0.1:{port}"


OTHER_USER_PROBE = r"""
import http.client, json, os, sys
port, body = int(sys.argv[1]), sys.argv[2].encode()
out = {"uid": os.getuid(), "answers": []}
for auth in ({}, {"Authorization": "bearer guessed"}, {"Authorization": "Bearer " + "k" * 16}):
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    connection.connect()
    client = "%s:%d" % connection.sock.getsockname()[:2]
    connection.request("POST", "/v1/chat/completions", body=body,
                       headers={"Content-Type": "application/json", **auth})
    response = connection.getresponse()
    out["answers"].append({"client": client, "status": response.status,
                           "code": json.loads(response.read())["error"]["code"]})
    connection.close()
print(json.dumps(out))
"""


def test_another_unix_user_cannot_use_or_switch_a_keyed_endpoint(keyed):
    """The owner set a key: a second Unix user made here, asking for the running model and
    for another preset (a switch), gets 401 each time, and each is one request-log line
    naming the refusal; the engine never sees a request of theirs."""
    from tests.support.other_user import run_as_other_user, uid_of_other_user

    keyed["attach"]()
    received = len(keyed["engine"].received)
    tried = []
    for model in (MODEL, "rf-huge"):  # the running model, and a switch to another preset
        shown = json.loads(
            run_as_other_user(OTHER_USER_PROBE, str(keyed["port"]), chat(model).decode())
        )
        assert shown["uid"] == uid_of_other_user() != os.getuid()
        tried += shown["answers"]
    assert [a["status"] for a in tried] == [401] * 6, tried
    assert {a["code"] for a in tried} == {"invalid_api_key"}
    assert len(keyed["engine"].received) == received

    def rows() -> list[dict]:
        return [
            row for row in log_rows(keyed["data"]) if row["client"] in {a["client"] for a in tried}
        ]

    wait_for(lambda: len(rows()) == 6, timeout=5, what="a log line for each refusal")
    assert all(row["status"] == 401 and "API key" in row["error"] for row in rows()), rows()
