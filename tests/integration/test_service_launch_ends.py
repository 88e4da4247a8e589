"""How `sparkdeck launch` through the service ends when it does not end well (issue 31, items
3 and 5), on the real service and a real Docker daemon with busybox engines.

kill -9 of the service mid-launch: one line (what happened, what runs now, what to do), no
traceback, exit 1. Ctrl-C during a switch whose old engine ignores SIGTERM (a 30 s graceful
stop): the cancelled preset's container is never created, and the line says what runs.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from sparkdeck.runtime.state import SCOPE
from tests.conftest import base_fields, free_port, remove_scope, scope_containers, write_preset
from tests.support.cli import cli, run_cli
from tests.support.service_teardown import stop_service

pytestmark = pytest.mark.docker

SERVING = "trap 'exit 0' TERM; httpd -f -p 8080 -h /www & wait $!"  # ready at once
NEVER_READY = "trap 'exit 0' TERM; sleep 3600 & wait $!"
# sh as PID 1 ignores SIGTERM (and so does httpd, which inherits that): only the SIGKILL
# after Docker's grace period ends it
STUBBORN = "trap '' TERM; httpd -f -p 8080 -h /www"


def service_pid() -> int | None:
    from sparkdeck.service.liveness import lock_holder

    return lock_holder()


@pytest.fixture
def env(isolated_dirs, scope, docker_client) -> Iterator[dict[str, str]]:
    env = {
        **os.environ,
        "SPARKDECK_SCOPE": scope,
        "SPARKDECK_SERVICE": "auto",
        "SPARKDECK_ENDPOINT_PORT": str(free_port()),
    }
    yield env
    stop_service(env, service_pid())  # and SIGKILLed if it did not stop
    remove_scope(docker_client, scope)


def preset(isolated_dirs: dict[str, Path], preset_id: str, image: str, script: str) -> None:
    write_preset(
        isolated_dirs["config"] / "presets",
        preset_id,
        title=preset_id,
        kind="openai",
        image=image,
        port=free_port(),
        startup_timeout=120.0,
        **base_fields(),
        openai={
            "container_port": 8080,
            "entrypoint": ["/bin/sh", "-c", script],
            "health_path": "/index.html",
        },
    )


class Launching:
    """`sparkdeck launch` as a user runs it, its stdout lines read as they come."""

    def __init__(self, env: dict[str, str], errors: Path, *args: str) -> None:
        self._errors = errors.open("w+")
        self.proc = subprocess.Popen(
            cli("launch", *args),
            env=env,
            stdout=subprocess.PIPE,
            stderr=self._errors,
            text=True,
            stdin=subprocess.DEVNULL,
        )
        self.lines: list[str] = []
        assert self.proc.stdout is not None
        self._reader = threading.Thread(
            target=lambda: self.lines.extend(self.proc.stdout), daemon=True
        )
        self._reader.start()

    def wait_line(self, prefix: str, timeout: float) -> str:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            found = next((line for line in self.lines if line.startswith(prefix)), None)
            if found is not None:
                return found
            if self.proc.poll() is not None and not self._reader.is_alive():
                break
            time.sleep(0.05)
        raise AssertionError(f"no line {prefix!r}: {self.lines} {self.stderr()}")

    def finish(self, timeout: float) -> tuple[int, str]:
        try:
            code = self.proc.wait(timeout=timeout)
        finally:
            self.proc.kill()
        self._reader.join(timeout=5)
        return code, self.stderr()

    def stderr(self) -> str:
        self._errors.seek(0)
        return self._errors.read()


def test_kill9_of_the_service_mid_launch_is_one_line_saying_what_runs(
    env, isolated_dirs, scope, docker_client, busybox_image, tmp_path
):
    preset(isolated_dirs, "slow", busybox_image, NEVER_READY)
    launch = Launching(
        env, tmp_path / "stderr.txt", "slow", "--yes", "--no-flush", "--timeout", "120"
    )
    launch.wait_line("started sparkdeck-", 60)  # its container runs, not yet ready
    pid = service_pid()
    assert pid is not None
    (engine,) = [c for c in scope_containers(docker_client, scope) if c.status == "running"]
    os.kill(pid, signal.SIGKILL)
    killed = time.monotonic()
    code, stderr = launch.finish(timeout=30)
    said_in = time.monotonic() - killed
    assert code == 1, (launch.lines, stderr)
    assert "Traceback" not in stderr, stderr
    assert stderr.splitlines() == [
        f"sparkdeck: the sparkdeck service (process {pid}) ended during the launch of slow; "
        f"running now with no memory guard: slow ({engine.name}); `sparkdeck service start` "
        "guards it again, `sparkdeck stop` stops it"
    ], stderr
    print(f"kill -9 mid-launch: said in {said_in:.2f} s")


def test_a_service_stopped_mid_launch_is_one_line_after_its_silence(
    env, isolated_dirs, scope, docker_client, busybox_image, tmp_path
):
    """SIGSTOP of the service mid-launch: the stream goes quiet, and within SILENT_S (plus
    the command's own lookup of what runs) the launch says the service stopped answering,
    what runs unguarded, and what to do; no traceback, exit 1."""
    from sparkdeck.service.launch_follow import SILENT_S

    preset(isolated_dirs, "slow", busybox_image, NEVER_READY)
    launch = Launching(
        env, tmp_path / "stderr.txt", "slow", "--yes", "--no-flush", "--timeout", "120"
    )
    launch.wait_line("started sparkdeck-", 60)
    pid = service_pid()
    assert pid is not None
    os.kill(pid, signal.SIGSTOP)
    stopped = time.monotonic()
    try:
        code, stderr = launch.finish(timeout=SILENT_S + 25)
        said_in = time.monotonic() - stopped
    finally:
        os.kill(pid, signal.SIGCONT)
    assert code == 1, (launch.lines, stderr)
    assert "Traceback" not in stderr, stderr
    (line,) = stderr.splitlines()
    assert line.startswith(f"sparkdeck: the sparkdeck service (process {pid}) stopped answering"), (
        line
    )
    assert "during the launch of slow" in line and "running now with no memory guard" in line
    assert said_in < SILENT_S + 5, f"{said_in:.1f} s"  # the silence, then Docker's answer
    print(f"SIGSTOP mid-launch: said in {said_in:.2f} s")


def test_ctrl_c_during_a_switch_never_creates_the_cancelled_engine(
    env, isolated_dirs, scope, docker_client, busybox_image, tmp_path
):
    preset(isolated_dirs, "stubborn", busybox_image, STUBBORN)
    preset(isolated_dirs, "next", busybox_image, SERVING)
    first = run_cli("launch", "stubborn", "--yes", "--no-flush", env=env)
    assert first.returncode == 0, first.stderr
    since = int(time.time()) - 1
    launch = Launching(env, tmp_path / "stderr.txt", "next", "--yes", "--no-flush")
    launch.wait_line("stopping stubborn", 60)  # its graceful stop: 30 s, SIGTERM ignored
    time.sleep(1.0)
    launch.proc.send_signal(signal.SIGINT)
    interrupted = time.monotonic()
    code, stderr = launch.finish(timeout=90)
    waited = time.monotonic() - interrupted
    # the service is idle again (on the old code it went on, and started `next` 30 s later)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        status = json.loads(run_cli("service", "status", "--json", env=env).stdout)
        if status["busy"] is None:
            break
        time.sleep(0.5)
    assert status["busy"] is None and status["engine"] is None, status
    result = status["latest"]["launch-result"]
    assert result["preset"] == "next" and result["ok"] is False
    created = [
        event["Actor"]["Attributes"].get("io.sparkdeck.preset")
        for event in docker_client.events(
            since=since,
            until=int(time.time()) + 1,
            decode=True,
            filters={"type": "container", "event": "create", "label": f"{SCOPE}={scope}"},
        )
    ]
    assert "next" not in created, created  # never had a container, not even for a moment
    assert scope_containers(docker_client, scope) == []
    # and the command said so, in one line, once the outcome was known
    assert code == 1, (launch.lines, stderr)
    assert "Traceback" not in stderr and "the service ended" not in stderr, stderr
    assert stderr.splitlines() == [
        "cancelling the launch…",
        "sparkdeck: cancelled: launch of next interrupted; before its container was started; "
        "no sparkdeck engine is running now",
    ], stderr
    print(
        f"Ctrl-C during the switch: the outcome came {waited:.1f} s later (the old engine's "
        "graceful stop)"
    )
