"""`kill -9` of the process that runs a launch (the service, which `sparkdeck launch` started)
at each step of a switch (issue 11, tests): while the old engine is being stopped, right
after the new container is created, right after it started, and while its health is being
polled. Whatever the step, sparkdeck must come back clean:
never two engines alive, no stale launch lock, `status` accounts for every container it owns
(adopting a live orphan under the guard), and the next launch succeeds and leaves one engine.

Real parts: the CLI in subprocesses, the real Docker daemon and its event stream to find each
step, SIGSTOP then SIGKILL of the service at that moment.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from sparkdeck.config.file_lock import FileLock
from sparkdeck.guard import records
from sparkdeck.runtime.state import PRESET, SCOPE
from tests.conftest import base_fields, free_port, remove_scope, scope_containers, write_preset
from tests.support.cli import run_cli

pytestmark = pytest.mark.docker


def web_preset(presets, preset_id: str, image: str, health_delay_s: float = 0.0) -> None:
    # busybox httpd as PID 1 behind sh with a TERM trap (a stop takes no grace period); the
    # health page appears only after `health_delay_s`, so the launch sits in its health wait
    script = (
        "trap 'exit 0' TERM; mkdir -p /www; "
        f"(sleep {health_delay_s}; echo ok > /www/health) & "
        "httpd -f -p 8080 -h /www & wait"
    )
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
            "health_path": "/health",
            "entrypoint": ["/bin/sh", "-c", script],
        },
    )


# Docker events that mark each step, and how long after the event to strike
STEPS = {
    "stopping the old engine": ("kill", "a", 0.0),
    "new container created": ("create", "b", 0.0),
    "new container started": ("start", "b", 0.0),
    "waiting for health": ("start", "b", 1.0),
}


def kill_launch_at(
    docker_client, scope: str, env: dict[str, str], event: str, preset: str, delay_s: float
) -> None:
    events = docker_client.events(
        decode=True,
        since=int(time.time()) - 1,
        filters={"type": "container", "event": event, "label": f"{SCOPE}={scope}"},
    )
    launch = subprocess.Popen(
        [sys.executable, "-m", "sparkdeck", "launch", "b", "--no-flush", "--yes"],
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        for seen in events:
            labels = seen.get("Actor", {}).get("Attributes", {})
            if labels.get(PRESET) == preset:
                time.sleep(delay_s)
                # the process that runs the launch: the service the first launch started
                owner = FileLock("service").held_by()
                assert owner is not None and owner != launch.pid
                os.kill(owner, signal.SIGSTOP)  # frozen at this step...
                os.kill(owner, signal.SIGKILL)  # ...and killed there, as `kill -9`
                break
    finally:
        events.close()
    launch.wait(timeout=60)  # the command that asked for it is told and ends


@pytest.mark.parametrize("step", list(STEPS))
def test_kill_9_at_each_launch_step_leaves_a_clean_state(
    step, isolated_dirs, scope, docker_client, busybox_image
):
    presets = isolated_dirs["config"] / "presets"
    web_preset(presets, "a", busybox_image)
    web_preset(presets, "b", busybox_image, health_delay_s=3.0)
    env = {**os.environ, "SPARKDECK_SCOPE": scope}
    try:
        first = run_cli("launch", "a", "--no-flush", "--yes", env=env)
        assert first.returncode == 0, first.stderr
        event, preset, delay = STEPS[step]
        kill_launch_at(docker_client, scope, env, event, preset, delay)

        alive = [c for c in scope_containers(docker_client, scope) if c.status == "running"]
        assert len(alive) <= 1, [c.name for c in alive]  # never two engines at once

        status = run_cli("status", "--json", env=env)
        assert status.returncode == 0, status.stderr
        report = json.loads(status.stdout)
        for container in alive:  # every live container is sparkdeck's, on record
            assert records.load_launch_record(container.id) is not None, (
                step,
                container.name,
                report.get("adopted"),
            )

        # no stale lock, and the next launch leaves exactly one engine: the new one
        again = run_cli("launch", "b", "--no-flush", "--yes", env=env)
        assert again.returncode == 0, (step, again.stdout, again.stderr)
        running = [c for c in scope_containers(docker_client, scope) if c.status == "running"]
        assert [c.labels[PRESET] for c in running] == ["b"]
        assert records.launch_record_ids() == [running[0].id]
    finally:
        remove_scope(docker_client, scope)
