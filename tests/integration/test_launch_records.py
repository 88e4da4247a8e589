"""Launch records keyed by container id, and the orphan a `kill -9` of `launch` leaves behind
(issue 11, item 8). Real parts: the CLI in subprocesses, the real Docker daemon, its event
stream to catch the moment the new container starts, SIGSTOP/SIGKILL of the launch process.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from sparkdeck.guard import records
from sparkdeck.runtime.state import PRESET, SCOPE
from tests.conftest import base_fields, free_port, remove_scope, scope_containers, write_preset
from tests.support.cli import run_cli

pytestmark = pytest.mark.docker


def web_preset(presets, preset_id: str, image: str) -> None:
    write_preset(
        presets,
        preset_id,
        title=preset_id,
        kind="openai",
        image=image,
        port=free_port(),
        **base_fields(),
        openai={
            "container_port": 8080,
            "health_path": "/index.html",
            # sh as PID 1 with a TERM trap: a stop takes no grace period
            "entrypoint": ["/bin/sh", "-c", "trap 'exit 0' TERM; httpd -f -p 8080 -h /www & wait"],
        },
    )


def record_mentions(container_id: str) -> bool:
    return any(
        container_id in path.read_text(errors="replace")
        for path in records.launches_dir().glob("*.json")
    )


def kill_launch_right_after_its_start(
    docker_client, scope: str, env: dict[str, str], preset_id: str
) -> str:
    """Start `sparkdeck launch`, freeze it (SIGSTOP) the moment Docker reports its new
    container started, and kill -9 it there. Retried until the freeze lands before the
    launch wrote its record (the window is a few HTTP round trips wide)."""
    for attempt in range(10):
        since = int(time.time()) - 1
        events = docker_client.events(
            decode=True,
            since=since,
            filters={"type": "container", "event": "start", "label": f"{SCOPE}={scope}"},
        )
        before = {c.id for c in scope_containers(docker_client, scope)}
        launch = subprocess.Popen(
            [sys.executable, "-m", "sparkdeck", "launch", preset_id, "--no-flush", "--yes"],
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:
            for event in events:
                started = event.get("id") or event.get("Actor", {}).get("ID", "")
                if started and started not in before:
                    os.kill(launch.pid, signal.SIGSTOP)
                    break
        finally:
            events.close()
        in_window = not record_mentions(started)
        launch.kill()  # SIGKILL, as `kill -9`
        launch.wait(timeout=30)
        if in_window:
            print(f"frozen before the record at attempt {attempt + 1}")
            return started
    pytest.fail("the launch wrote its record before it could be frozen, 10 times")


@pytest.mark.in_process_owner(
    "kills the process that runs the launch: with the service on that is the service "
    "(test_service.py's kill -9 mid-launch test)"
)
def test_kill_9_of_launch_after_the_create_leaves_no_wrong_record_and_adopts_the_orphan(
    isolated_dirs, scope, docker_client, busybox_image
):
    presets = isolated_dirs["config"] / "presets"
    web_preset(presets, "a", busybox_image)
    web_preset(presets, "b", busybox_image)
    env = {**os.environ, "SPARKDECK_SCOPE": scope}
    try:
        first = run_cli("launch", "a", "--no-flush", "--yes", env=env)
        assert first.returncode == 0, first.stderr
        (previous,) = scope_containers(docker_client, scope)
        assert records.load_launch_record(previous.id)["container_name"] == previous.name

        orphan_id = kill_launch_right_after_its_start(docker_client, scope, env, "a")
        (orphan,) = scope_containers(docker_client, scope)
        assert orphan.id == orphan_id and orphan.status == "running"
        assert orphan.name == previous.name  # the same name, a different container
        # no record is read as the orphan's: it has none of its own yet
        assert records.load_launch_record(orphan_id) is None

        status = run_cli("status", "--json", env=env)
        assert status.returncode == 0, status.stderr
        report = json.loads(status.stdout)
        assert report["adopted"] == [orphan_id]  # adopted, not removed: still running
        adopted = records.load_launch_record(orphan_id)
        assert adopted["adopted"] is True and adopted["container_name"] == orphan.name
        # the records match the containers: the gone ones' records were dropped
        assert records.launch_record_ids() == [orphan_id]
        shown = run_cli("status", env=env)
        assert "adopted" not in shown.stdout  # adopted once; now it has its record

        # the next launch stops the orphan like any engine it launched, measured itself
        nxt = run_cli("launch", "b", "--no-flush", "--yes", env=env)
        assert nxt.returncode == 0, nxt.stderr
        assert "a holds 0.0 GiB (container cgroup)" in nxt.stdout, nxt.stdout
        (only,) = scope_containers(docker_client, scope)
        assert only.labels[PRESET] == "b"
        assert records.launch_record_ids() == [only.id]
    finally:
        remove_scope(docker_client, scope)
