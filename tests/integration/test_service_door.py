"""Errors at the door (issue 31, items 3, 4, 5 and 8), on the real service process.

What keeps the service from starting (settings.toml not UTF-8 or nested too deep, a regular
file where its socket goes, a socket removed under a live service, the endpoint's port held
by another program) is said by the command that asked, in one line, within 2 s, with a CPU
hog running beside it. kill -9 of the service mid-launch ends `sparkdeck launch` with one line
saying what runs now. Ctrl-C during a switch whose old engine ignores SIGTERM never creates the
cancelled preset's container. A front end of other dirs than the service's is told so, and the
endpoint's own state (off, and why) is reported rather than whoever holds its port.
"""

from __future__ import annotations

import http.server
import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.conftest import base_fields, free_port, write_preset
from tests.support.cli import run_cli
from tests.support.service_teardown import stop_service

DOOR_S = 2.0  # the promise: the command that asked says it within this long


def timed_cli(
    *args: str, env: dict[str, str], tries: int = 3, again: Callable[[], object] = lambda: None
) -> tuple[subprocess.CompletedProcess, float]:
    """Run the command and time it from its start to its exit, as a user waits for it: the
    fastest of `tries` runs (other tenants of a shared 2-core CI box add seconds at random;
    the CPU hog is there on every run), each well under the old 15 s start-up timeout.
    `again` puts things back as they were before another try."""
    runs = []
    for attempt in range(tries):
        if attempt:
            again()
        started = time.monotonic()
        done = run_cli(*args, env=env, timeout=30)
        runs.append((time.monotonic() - started, done))
        assert runs[-1][0] < 3 * DOOR_S, f"{runs[-1][0]:.2f} s: {done.stderr}"
        if runs[-1][0] < DOOR_S:
            break
    took, done = min(runs, key=lambda run: run[0])
    return done, took


@pytest.fixture
def cpu_hog() -> Iterator[None]:
    """A process spinning on a core beside the command (the 2 s must hold on a busy box)."""
    hog = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    time.sleep(0.3)  # spinning before the command starts
    yield
    hog.kill()
    hog.wait()


@pytest.fixture
def env(isolated_dirs) -> Iterator[dict[str, str]]:
    env = {**os.environ, "SPARKDECK_SERVICE": "auto", "SPARKDECK_ENDPOINT_PORT": str(free_port())}
    yield env
    stop_service(env, _service_pid(isolated_dirs))  # and SIGKILLed if it did not stop


def _service_pid(isolated_dirs: dict[str, Path]) -> int | None:
    from sparkdeck.service.liveness import lock_holder

    return lock_holder()  # this test's data dir is the service's (isolated_dirs)


def one_line(stderr: str) -> str:
    """The command's error: exactly one line, no traceback."""
    assert "Traceback" not in stderr, stderr
    lines = [line for line in stderr.splitlines() if line.strip()]
    assert len(lines) == 1, stderr
    return lines[0]


# ----- item 4: what keeps the service from starting ------------------------------------------


@pytest.mark.parametrize(
    "content, problem",
    [
        (b'[guard]\nstop_available_pct = "\xff\xfe"\n', "is not UTF-8 text"),
        (b"a = " + b"[" * 600 + b"]" * 600 + b"\n", "nested too deep"),
    ],
    ids=["not-utf8", "too-deep"],
)
def test_a_bad_settings_file_is_said_by_the_command_within_2_s(
    env, isolated_dirs, cpu_hog, content, problem
):
    isolated_dirs["config"].mkdir(parents=True)
    settings = isolated_dirs["config"] / "settings.toml"
    settings.write_bytes(content)
    done, took = timed_cli("launch", "anything", env=env)
    line = one_line(done.stderr)
    assert done.returncode == 1
    assert line.startswith(f"sparkdeck: the sparkdeck service did not start: {settings}: ")
    assert problem in line and "fix settings.toml (or move it away)" in line
    assert took < DOOR_S, f"{took:.2f} s to say: {line}"
    print(f"bad settings ({problem}): said in {took:.2f} s beside a CPU hog")


def test_a_regular_file_at_the_socket_path_is_said_within_2_s(env, isolated_dirs, cpu_hog):
    sock = isolated_dirs["runtime"] / "service.sock"
    sock.write_text("not a socket")
    done, took = timed_cli("service", "start", env=env)
    line = one_line(done.stderr)
    assert done.returncode == 1
    assert line == (
        f"sparkdeck: the sparkdeck service did not start: {sock} is not a socket (a "
        "regular file), so the service cannot listen there: remove it (`rm "
        f"{sock}`) or set SPARKDECK_RUNTIME_DIR to another folder, then run this "
        "again"
    )
    assert sock.read_text() == "not a socket"  # not ours: left as it was
    assert took < DOOR_S, f"{took:.2f} s"
    print(f"regular file at the socket path: said in {took:.2f} s beside a CPU hog")


def test_a_socket_removed_under_a_live_service_is_said_within_2_s(env, isolated_dirs, cpu_hog):
    started = run_cli("service", "start", env=env)
    assert started.returncode == 0, started.stderr
    pid = _service_pid(isolated_dirs)
    sock = isolated_dirs["runtime"] / "service.sock"
    sock.unlink()
    done, took = timed_cli("launch", "anything", env=env)
    line = one_line(done.stderr)
    assert done.returncode == 1
    assert line == (
        f"sparkdeck: the service already runs (process {pid}) but its socket {sock} "
        "was removed, so no front end can reach it: `sparkdeck service stop` ends it "
        "(the engine keeps running), then run this again"
    )
    assert took < DOOR_S, f"{took:.2f} s"
    # and what it says to do works: stop, then a start that answers
    assert run_cli("service", "stop", env=env).returncode == 0
    again = run_cli("service", "start", env=env)
    assert again.returncode == 0 and "started" in again.stdout, again.stderr
    print(f"removed socket: said in {took:.2f} s beside a CPU hog")


class OtherOpenAI(http.server.ThreadingHTTPServer):
    """Another program's OpenAI-compatible server on the endpoint's port; counts requests."""

    def __init__(self, port: int) -> None:
        self.requests: list[str] = []
        owner = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                owner.requests.append(self.path)
                body = json.dumps({"data": [{"id": "someone-elses-model"}]}).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: object) -> None:
                pass

        super().__init__(("127.0.0.1", port), Handler)
        threading.Thread(target=self.serve_forever, daemon=True).start()


def test_a_taken_endpoint_port_is_said_at_start_and_reported_not_probed(
    env, isolated_dirs, cpu_hog
):
    port = int(env["SPARKDECK_ENDPOINT_PORT"])
    other = OtherOpenAI(port)
    try:
        done, took = timed_cli(
            "service", "start", env=env, again=lambda: run_cli("service", "stop", env=env)
        )
        assert done.returncode == 0, done.stderr
        why = (
            f"off: Address already in use on 127.0.0.1:{port} (another program holds the "
            "port? set [endpoint] port in settings.toml or stop that program, then restart "
            "the service: `sparkdeck service stop`, `sparkdeck service start`)"
        )
        assert one_line(done.stderr) == f"sparkdeck: the OpenAI endpoint is {why}"
        assert done.stdout.startswith("the sparkdeck service started (process ")
        assert took < DOOR_S, f"{took:.2f} s"
        status = run_cli("service", "status", env=env)
        assert f"endpoint: {why}" in status.stdout.splitlines(), status.stdout
        report = json.loads(run_cli("service", "status", "--json", env=env).stdout)
        assert report["endpoint"]["on"] is False
        assert report["endpoint"]["error"] == "Address already in use"
        shown = run_cli("endpoint", env=env)
        assert shown.returncode == 0, shown.stderr
        assert "endpoint OFF" in shown.stdout and "endpoint answering" not in shown.stdout
        assert (
            f"the OpenAI endpoint is off: Address already in use on 127.0.0.1:{port}"
            in shown.stdout
        )
        as_json = json.loads(run_cli("endpoint", "--json", env=env).stdout)
        assert as_json["endpoint_off"] is True and as_json["models_from"] == "presets"
        assert "someone-elses-model" not in as_json["models"]
        assert other.requests == []  # the other program was never asked
    finally:
        other.shutdown()
        other.server_close()
    print(f"taken endpoint port: said by `service start` in {took:.2f} s beside a CPU hog")


# ----- item 8: a front end of other dirs ------------------------------------------------------


def test_a_cli_of_another_config_dir_is_told_so_not_unknown_preset(env, isolated_dirs, tmp_path):
    assert run_cli("service", "start", env=env).returncode == 0
    pid = _service_pid(isolated_dirs)
    mine = tmp_path / "my-config"
    write_preset(
        mine / "presets",
        "mine",
        title="mine",
        kind="openai",
        image="busybox",
        port=free_port(),
        **base_fields(),
        openai={"container_port": 8080},
    )
    done = run_cli("launch", "mine", "--yes", env={**env, "SPARKDECK_CONFIG_DIR": str(mine)})
    line = one_line(done.stderr)
    assert done.returncode == 1
    assert "no preset with id" not in line
    assert line == (
        f"sparkdeck: the running sparkdeck service (process {pid}) is not this "
        f"command's: its config dir is {isolated_dirs['config']}, this command's "
        f"{mine} (SPARKDECK_CONFIG_DIR / SPARKDECK_DATA_DIR differ). Run this with "
        "the service's dirs, or `sparkdeck service stop` and run it again to start "
        "one with these"
    )
    other_data = tmp_path / "my-data"
    status = run_cli("service", "status", env={**env, "SPARKDECK_DATA_DIR": str(other_data)})
    assert (
        f"its data dir is {isolated_dirs['data']}, this command's {other_data}" in status.stdout
    ), status.stdout
