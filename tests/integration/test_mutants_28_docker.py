"""Tests that kill mutations every quick-tier test let live (issue 28, item 5): the half that
needs real parts. tools/mutants.py applies each mutation and runs the test named beside it.

Real parts: the Docker daemon (containers that carry some of sparkdeck's labels and not all,
a busybox engine), a second process that holds the launch lock for real, and the real service
with its OpenAI endpoint in front of an attached engine stand-in: a real HTTP server on
loopback that records every request it gets, headers and body.
"""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any

import docker
import pytest

from sparkdeck.config.file_lock import LockBusy
from sparkdeck.launch.sequence import Launcher
from sparkdeck.runtime.client import DockerRuntime
from sparkdeck.runtime.errors import NotManaged
from sparkdeck.runtime.state import MANAGED, SCOPE
from tests.conftest import (
    busybox_preset,
    free_port,
    llama_preset_fields,
    scope_containers,
    write_preset,
)
from tests.support.cli import run_cli, wait_for
from tests.support.endpoint_service import ask, write_settings
from tests.support.metrics_loopback import serving_handler
from tests.support.service_env import service_env  # noqa: F401 - a fixture

pytestmark = pytest.mark.docker
HTTPD = "exec httpd -f -p 8080 -h /www"


# ----- runtime/client.py `_ours`: both labels, and both must match ---------------------------
@pytest.mark.parametrize(
    "labels",
    [
        pytest.param({"managed": "false", "scope": "ours"}, id="our-scope-not-managed"),
        pytest.param({"scope": "ours"}, id="our-scope-no-managed-label"),
        pytest.param({"managed": "true", "scope": "theirs"}, id="managed-another-scope"),
    ],
)
def test_a_container_with_half_our_labels_is_never_touched(
    labels: dict[str, str], runtime: DockerRuntime, docker_client, scope: str, busybox_image: str
):
    """Kills: `_ours` with `and` -> `or`, and `_ours` without its `managed == "true"` half.
    Each container here matches one of the two labels and not the other: sparkdeck's stop,
    inspect and removal refuse it and leave it running."""
    given = {MANAGED: labels["managed"]} if "managed" in labels else {}
    given[SCOPE] = scope if labels["scope"] == "ours" else scope + "-theirs"
    stranger = docker_client.containers.run(
        busybox_image, ["sleep", "60"], detach=True, labels=given
    )
    try:
        with pytest.raises(NotManaged, match="not created by sparkdeck"):
            runtime.stop(stranger.id, grace=0)
        with pytest.raises(NotManaged, match="not created by sparkdeck"):
            runtime.inspect(stranger.id)
        runtime._remove_quietly(stranger.id)  # the cleanup path: refuses in silence
        stranger.reload()
        assert stranger.status == "running"
    finally:
        with contextlib.suppress(docker.errors.NotFound):  # a broken `_ours` removed it
            stranger.remove(force=True)


# ----- launch/sequence.py: the launch lock's failure ----------------------------------------
HOLD_LOCK = """
import sys
from sparkdeck.config.file_lock import FileLock
FileLock("launch", "a launch of other-preset").acquire_or_raise()
print("held", flush=True)
sys.stdin.read()  # until the test closes our stdin
"""


def test_while_another_process_holds_the_launch_lock_stop_and_launch_touch_nothing(
    runtime: DockerRuntime, docker_client, scope: str, tmp_path, busybox_image: str
):
    """Kills: `raise lock_busy(lock, what)` -> `pass` (a refused lock ignored: the stop and
    the launch would act in the middle of another process's launch)."""
    engine = runtime.start(
        busybox_preset(tmp_path, "running", busybox_image, HTTPD).container_spec()
    )
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLD_LOCK], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        launcher = Launcher(runtime, stop_grace=0)
        with pytest.raises(LockBusy) as stopping:
            launcher.stop_engines()
        assert str(stopping.value).startswith(
            f"a launch of other-preset by process {holder.pid} is in progress"
        )
        assert "a stop was not started and nothing was touched" in str(stopping.value)
        other = busybox_preset(tmp_path, "next", busybox_image, HTTPD)
        with pytest.raises(
            LockBusy,
            match=f"by process {holder.pid} .* a launch of next was "
            "not started and nothing was touched",
        ):
            launcher.launch(other, flush=False)
        alive = scope_containers(docker_client, scope)
        assert [(c.id, c.status) for c in alive] == [(engine.container_id, "running")]
    finally:
        holder.stdin.close()  # type: ignore[union-attr]
        holder.wait(timeout=30)


# ----- endpoint/app.py and switching.py, on the real service --------------------------------
KEY = "k3y-for-mutants"
GIB = 2**30
MODEL = "atlas-7b"


class Recorder(BaseHTTPRequestHandler):
    """An attached engine: /v1/models lists MODEL; each POST is recorded and answered."""

    protocol_version = "HTTP/1.1"
    seen: list[dict[str, Any]] = []
    lock = threading.Lock()

    def do_GET(self) -> None:
        self._answer({"object": "list", "data": [{"id": MODEL, "object": "model"}]})

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))))
        with self.lock:
            self.seen.append(
                {
                    "headers": {k.lower(): v for k, v in self.headers.items()},
                    "model": body.get("model"),
                }
            )
        self._answer(
            {
                "id": "x",
                "object": "chat.completion",
                "model": MODEL,
                "choices": [
                    {
                        "index": 0,
                        "finish_reason": "stop",
                        "message": {"role": "assistant", "content": "hi"},
                    }
                ],
                "usage": {"prompt_tokens": 3, "completion_tokens": 1},
            }
        )

    def _answer(self, data: dict[str, Any]) -> None:
        raw = json.dumps(data).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(raw)))
        self.end_headers()
        self.wfile.write(raw)

    def log_message(self, *args: object) -> None:
        pass


def chat(model: str) -> bytes:
    return json.dumps({"model": model, "messages": [{"role": "user", "content": "hi"}]}).encode()


@pytest.fixture
def keyed_service(service_env, isolated_dirs) -> Iterator[Callable[[bool], int]]:
    """`start(switch_on_request)`: the service with an API key, a stop line stated in
    settings.toml (5 % of MemTotal: the headroom a fit check keeps), a preset that never
    fits (4000 GiB), and the recorder attached; returns the endpoint's port once a request
    went through."""
    port = free_port()
    env = {**service_env, "SPARKDECK_ENDPOINT_PORT": str(port), "EP_TEST_KEY": KEY}
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
    Recorder.seen = []
    with serving_handler(Recorder) as url:

        def start(switch_on_request: bool) -> int:
            write_settings(
                isolated_dirs["config"],
                {"api_key_env": "EP_TEST_KEY", "switch_on_request": switch_on_request},
            )
            with (isolated_dirs["config"] / "settings.toml").open("a") as settings:
                settings.write("[guard]\nstop_available_pct = 5.0\n")
            attached = run_cli("attach", url, "--name", "recorder", env=env)
            assert attached.returncode == 0, attached.stderr
            started = run_cli("service", "start", env=env)
            assert started.returncode == 0, started.stderr
            wait_for(
                lambda: (
                    ask(
                        port,
                        "POST",
                        "/v1/chat/completions",
                        chat(MODEL),
                        {"Authorization": f"Bearer {KEY}"},
                    ).status
                    == 200
                ),
                timeout=30,
                every=0.3,
                what="the endpoint forwarding to the recorder",
            )
            Recorder.seen = []
            return port

        yield start


@pytest.fixture
def keyed_endpoint(keyed_service: Callable[[bool], int]) -> int:
    """The keyed service with switch_on_request left off (its default)."""
    return keyed_service(False)


def test_the_services_api_key_never_reaches_the_engine(keyed_endpoint: int):
    """Kills: the `authorization` header forwarded when the service has a key of its own
    (`... and not (self._key and k.lower() == b"authorization")` dropped)."""
    answer = ask(
        keyed_endpoint,
        "POST",
        "/v1/chat/completions",
        chat(MODEL),
        {"Authorization": f"Bearer {KEY}", "Content-Type": "application/json", "X-Trace": "t-1"},
    )
    assert answer.status == 200, answer.body
    [request] = Recorder.seen
    assert "authorization" not in request["headers"]
    assert request["headers"]["x-trace"] == "t-1"  # the caller's other headers go on
    assert KEY not in json.dumps(request)


def test_an_unknown_model_is_refused_not_rewritten_to_the_running_one(keyed_endpoint: int):
    """Kills: `if model in upstream.aliases:` -> `if True:` (any model not served would be
    rewritten to the running one and answered by it)."""
    answer = ask(
        keyed_endpoint,
        "POST",
        "/v1/chat/completions",
        chat("nobody/unknown-70b"),
        {"Authorization": f"Bearer {KEY}"},
    )
    assert answer.status == 404, answer.body
    assert answer.error["code"] == "model_not_found"
    assert answer.error["message"].startswith(
        f"model 'nobody/unknown-70b' is not running: this endpoint serves '{MODEL}'"
    )
    assert Recorder.seen == []


def test_with_switch_on_request_off_a_presets_model_is_refused_not_switched_to(
    keyed_endpoint: int, docker_client, scope: str
):
    """Kills: `if not self._settings.switch_on_request or ...` -> without the setting (the
    endpoint would plan a switch: the fit check's 409 instead of the 404 naming the switch)."""
    answer = ask(
        keyed_endpoint,
        "POST",
        "/v1/chat/completions",
        chat("rf-huge"),
        {"Authorization": f"Bearer {KEY}"},
    )
    assert answer.status == 404, answer.body
    assert answer.error["code"] == "model_not_found"
    assert "switch with `sparkdeck launch rf-huge`" in answer.error["message"]
    assert Recorder.seen == [] and scope_containers(docker_client, scope) == []


def mem_total() -> int:
    """MemTotal in bytes, read here from /proc/meminfo."""
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemTotal:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no MemTotal in /proc/meminfo")


def test_with_switch_on_request_a_model_that_cannot_fit_is_refused_with_its_numbers(
    keyed_service: Callable[[bool], int], docker_client, scope: str
):
    """The contract `"4000.00 GiB" in m or "4000" in m` stood for: the 409 states the claim,
    the headroom kept (the stop line's share of MemTotal) and what the two add up to."""
    port = keyed_service(True)
    answer = ask(
        port, "POST", "/v1/chat/completions", chat("rf-huge"), {"Authorization": f"Bearer {KEY}"}
    )
    assert answer.status == 409, answer.body
    assert answer.error["code"] == "model_does_not_fit"
    lines = answer.error["message"].splitlines()
    assert lines[0] == (
        "rf-huge does not fit in memory, so the endpoint did not switch to it "
        "(the running engine keeps running):"
    )
    headroom = int(0.05 * mem_total())
    fields = {
        line.split(":", 1)[0]: line.split(":", 1)[1].strip()
        for line in lines[1:]
        if not line.startswith(" ")
    }
    # a stated size: an estimate (~), named as the user's
    assert fields["claim"].startswith(
        "~4000.0 GiB (llamacpp.memory_gib = 4000 as stated in the preset)"
    ), fields
    assert fields["headroom kept"] == (f"{headroom / GIB:.1f} GiB (the watchdog's stop threshold)")
    assert fields["verdict"].startswith(
        f"does not fit: needs {(4000 * GIB + headroom) / GIB:.1f} GiB with headroom, only "
    )
    assert answer.headers["x-should-retry"] == "false"
    assert Recorder.seen == [] and scope_containers(docker_client, scope) == []
