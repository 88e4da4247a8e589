"""Safe launching on the real Docker daemon (issue 11, items 3, 4, 6 and 7): one launch at a
time across processes, every check made before the running engine is touched, a failure after
the stop kept until dismissed, no removal of a container that is not ours, and the truth after
a second Ctrl-C.

The engines are busybox containers (tests/support/images.py): `sh` as PID 1 with a TERM trap
so that a stop takes a moment, not the whole grace period, unless a test wants otherwise.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import docker
import docker.errors
import pytest

from sparkdeck.config.file_lock import FileLock
from sparkdeck.launch.failure import last_failure
from sparkdeck.launch.sequence import Launcher
from sparkdeck.runtime.client import DockerRuntime
from sparkdeck.runtime.errors import LaunchError
from sparkdeck.runtime.spec import ContainerSpec
from sparkdeck.runtime.state import MANAGED, SCOPE
from tests.conftest import (
    base_fields,
    busybox_preset,
    free_port,
    remove_scope,
    scope_containers,
    write_preset,
)
from tests.support.cli import cli, run_cli, wait_for

pytestmark = pytest.mark.docker


# Serves /www after `delay` seconds, like an engine loading weights; exits on SIGTERM at once.
def serving(delay: float = 0.0) -> str:
    return f"trap 'exit 0' TERM; sleep {delay} & wait $!; httpd -f -p 8080 -h /www & wait $!"


NEVER_READY = "trap 'exit 0' TERM; sleep 3600 & wait $!"
IGNORES_TERM = "trap '' TERM; while true; do sleep 1; done"  # only SIGKILL ends it
LAUNCH_FLAGS = ("--yes", "--no-flush", "--no-switch-wait")


@pytest.fixture
def cli_env(isolated_dirs, scope, docker_client) -> Iterator[dict[str, str]]:
    yield {**os.environ, "SPARKDECK_SCOPE": scope}
    remove_scope(docker_client, scope)


def cli_preset(
    isolated_dirs: dict[str, Path],
    preset_id: str,
    image: str,
    script: str,
    port: int | None = None,
    **fields: Any,
) -> int:
    """A busybox preset in the CLI's own preset dir; returns its host port."""
    port = port or free_port()
    write_preset(
        isolated_dirs["config"] / "presets",
        preset_id,
        title=preset_id,
        kind="openai",
        image=image,
        port=port,
        startup_timeout=60.0,
        **{**base_fields(), **fields},
        openai={
            "container_port": 8080,
            "entrypoint": ["/bin/sh", "-c", script],
            "health_path": "/index.html",
        },
    )
    return port


def alive(client: docker.DockerClient, scope: str) -> list[dict[str, Any]]:
    """The scope's running containers as Docker lists them (Id, Names, Labels). The list
    alone, without an inspect of each, which races a container removed meanwhile."""
    return client.api.containers(filters={"label": f"{SCOPE}={scope}", "status": "running"})


def alive_ids(client: docker.DockerClient, scope: str) -> list[str]:
    return [c["Id"] for c in alive(client, scope)]


def alive_presets(client: docker.DockerClient, scope: str) -> list[str]:
    return sorted(c["Labels"].get("io.sparkdeck.preset", "?") for c in alive(client, scope))


def launcher(runtime: DockerRuntime, events: list[Any] | None = None) -> Launcher:
    sink = events.append if events is not None else None
    return Launcher(runtime, on_event=sink, stop_grace=5)


def no_wait() -> threading.Event:
    skip = threading.Event()
    skip.set()  # these tests are not about the memory wait (see test_guard_switch_timeline)
    return skip


# ----- item 3: one launch at a time --------------------------------------------------------


class AliveWatcher(threading.Thread):
    """Counts the scope's running containers every 50 ms: the most seen at once."""

    def __init__(self, client: docker.DockerClient, scope: str):
        super().__init__(daemon=True)
        self.client, self.scope = client, scope
        self.most = 0
        self.done = threading.Event()

    def run(self) -> None:
        while not self.done.is_set():
            self.most = max(self.most, len(alive(self.client, self.scope)))
            self.done.wait(0.05)


def test_two_launches_at_once_never_leave_two_engines(
    cli_env, isolated_dirs, scope, docker_client, busybox_image
):
    cli_preset(isolated_dirs, "a", busybox_image, serving(1.5))
    cli_preset(isolated_dirs, "b", busybox_image, serving(1.5))
    refused = 0
    for trial in range(10):
        watcher = AliveWatcher(docker_client, scope)
        watcher.start()
        procs = {
            p: subprocess.Popen(
                cli("launch", p, *LAUNCH_FLAGS, "--timeout", "60"),
                env=cli_env,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
                stdin=subprocess.DEVNULL,
            )
            for p in ("a", "b")
        }
        out = {p: proc.communicate(timeout=120) for p, proc in procs.items()}
        watcher.done.set()
        watcher.join()
        codes = {p: procs[p].returncode for p in procs}
        left = alive(docker_client, scope)
        context = f"trial {trial}: {codes} {out}"
        assert watcher.most <= 1, f"two engines alive at once; {context}"
        assert len(left) == 1, context
        winner = left[0]["Labels"]["io.sparkdeck.preset"]
        assert codes[winner] == 0 and "ready in" in out[winner][0], context
        loser = "b" if winner == "a" else "a"
        if codes[loser] == 1:  # refused: told what is in progress, nothing touched
            refused += 1
            stderr = out[loser][1]
            # the service runs both commands' launches: it names the one it runs
            assert f"a launch of {winner} is in progress in the service" in stderr, context
            assert "is in progress" in stderr and "Traceback" not in stderr, context
            assert "ready in" not in out[loser][0], context
        else:  # it ran wholly before the winner took the lock: its engine was replaced
            assert codes[loser] == 0 and f"stopping {loser}" in out[winner][0], context
        remove_scope(docker_client, scope)
    assert refused >= 3, f"only {refused} of 10 trials overlapped: the race was not tested"


def test_kill_9_of_the_lock_holder_leaves_no_stale_lock(
    cli_env, isolated_dirs, scope, docker_client, busybox_image
):
    cli_preset(isolated_dirs, "slow", busybox_image, NEVER_READY)
    cli_preset(isolated_dirs, "next", busybox_image, serving())
    front = subprocess.Popen(
        cli("launch", "slow", *LAUNCH_FLAGS, "--timeout", "300"),
        env=cli_env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        stdin=subprocess.DEVNULL,
    )
    try:
        assert front.stdout is not None
        for line in front.stdout:  # the launch holds the lock until its engine is ready
            if line.startswith("started sparkdeck-"):
                break
        # the launch (and its lock) is the service's, which this command started
        holder = FileLock("launch").held_by()
        assert holder is not None and holder == FileLock("service").held_by() != front.pid
        refused = run_cli("launch", "next", *LAUNCH_FLAGS, env=cli_env)
        assert refused.returncode == 1
        assert "a launch of slow is in progress in the service" in refused.stderr
        assert alive_presets(docker_client, scope) == ["slow"]
        stop = run_cli("stop", env=cli_env)  # a stop waits its turn too
        assert stop.returncode == 1 and "a launch of slow" in stop.stderr
        os.kill(holder, signal.SIGKILL)  # no cleanup runs, the kernel drops the flock
    finally:
        front.kill()
        front.wait(timeout=30)
    started = time.monotonic()
    after = run_cli("launch", "next", *LAUNCH_FLAGS, "--timeout", "60", env=cli_env)
    assert after.returncode == 0, after.stderr
    assert "ready in" in after.stdout and time.monotonic() - started < 60
    assert alive_presets(docker_client, scope) == ["next"]


# ----- item 4: check before touching; a failure after the stop is kept ---------------------


def test_a_held_port_fails_the_switch_before_the_running_engine_is_stopped(
    cli_env, isolated_dirs, scope, docker_client, busybox_image
):
    port_a = cli_preset(isolated_dirs, "a", busybox_image, serving())
    assert run_cli("launch", "a", *LAUNCH_FLAGS, env=cli_env).returncode == 0
    (engine_a,) = alive_ids(docker_client, scope)
    with socket.socket() as held:  # another program on b's port
        held.bind(("127.0.0.1", 0))
        held.listen()
        port_b = held.getsockname()[1]
        cli_preset(isolated_dirs, "b", busybox_image, serving(), port=port_b)
        switched = run_cli("launch", "b", *LAUNCH_FLAGS, env=cli_env)
    assert switched.returncode == 1
    assert f"port {port_b} on 127.0.0.1 is already in use" in switched.stderr
    assert "Traceback" not in switched.stderr and "stopping a" not in switched.stdout
    assert alive_ids(docker_client, scope) == [engine_a]  # still serving
    # nothing was touched, so there is no failure to show
    assert run_cli("status", "--json", env=cli_env).stdout.count('"last_failure": null') == 1

    # the port the running engine holds is free for the switch: the stop frees it
    cli_preset(isolated_dirs, "c", busybox_image, serving(), port=port_a)
    same_port = run_cli("launch", "c", *LAUNCH_FLAGS, env=cli_env)
    assert same_port.returncode == 0, same_port.stderr
    assert alive_presets(docker_client, scope) == ["c"]


def test_no_gpu_runtime_fails_before_the_running_engine_is_stopped(
    runtime, docker_client, scope, tmp_path, busybox_image
):
    if "nvidia" in runtime.runtimes():
        # Not a missing part: the test needs a Docker WITHOUT the runtime (CI's).
        pytest.skip("this Docker has the NVIDIA runtime")
    first = launcher(runtime).launch(
        busybox_preset(tmp_path, "a", busybox_image, serving()),
        flush=False,
        skip_switch_wait=no_wait(),
    )
    wants_gpu = busybox_preset(tmp_path, "gpu", busybox_image, serving(), gpus=True)
    events: list[Any] = []
    with pytest.raises(LaunchError) as info:
        launcher(runtime, events).launch(wants_gpu, flush=False, skip_switch_wait=no_wait())
    assert alive_ids(docker_client, scope) == [first.container_id]  # still serving
    assert events == []  # refused before the pull, the fit check or any stop
    assert "set `gpus = false` in the preset for a host without the NVIDIA runtime" in str(
        info.value
    )


def test_a_failure_after_the_stop_is_shown_until_dismissed(
    cli_env, isolated_dirs, scope, docker_client, busybox_image
):
    cli_preset(isolated_dirs, "a", busybox_image, serving())
    assert run_cli("launch", "a", *LAUNCH_FLAGS, env=cli_env).returncode == 0
    # b's command is not in the image: Docker refuses it only at start, after a's stop
    port = free_port()
    write_preset(
        isolated_dirs["config"] / "presets",
        "b",
        title="b",
        kind="openai",
        image=busybox_image,
        port=port,
        **base_fields(),
        openai={"container_port": 8080, "entrypoint": ["/opt/engine/serve"]},
    )
    failed = run_cli("launch", "b", *LAUNCH_FLAGS, env=cli_env)
    assert failed.returncode == 1 and "stopping a" in failed.stdout
    assert alive(docker_client, scope) == []
    for _ in range(2):  # reading it does not clear it
        status = run_cli("status", "--json", env=cli_env)
        failure = json.loads(status.stdout)["last_failure"]
        assert failure is not None, status.stdout
        assert failure["preset_id"] == "b"
        assert failure["message"].startswith("a was stopped, then b failed to start: ")
    plain = run_cli("status", env=cli_env)
    assert "last launch failed: b: a was stopped" in plain.stdout
    dismissed = run_cli("dismiss", env=cli_env)
    assert dismissed.returncode == 0 and dismissed.stdout.startswith("dismissed: b: ")
    status = run_cli("status", "--json", env=cli_env)
    assert json.loads(status.stdout)["last_failure"] is None


# ----- item 6: only our own containers are removed -----------------------------------------


class CompetingRuntime(DockerRuntime):
    """DockerRuntime whose create meets a container of the same name made just before it
    (after the name was checked): the race two launches of one preset run into."""

    def __init__(self, *args: Any, competitor: dict[str, Any], **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.competitor = competitor
        self.made: Any = None

    def _create_kwargs(self, spec: ContainerSpec, name: str) -> dict[str, Any]:
        kwargs = super()._create_kwargs(spec, name)
        self.made = self.client.containers.run(name=name, detach=True, **self.competitor)
        return kwargs


@pytest.mark.parametrize("whose", ["another program", "another launch"])
def test_a_name_conflict_never_removes_the_other_container(
    whose, docker_client, scope, tmp_path, busybox_image
):
    labels = (
        {}
        if whose == "another program"
        else {MANAGED: "true", SCOPE: scope, "io.sparkdeck.preset": "dup"}
    )
    competitor = {
        "image": busybox_image,
        "entrypoint": ["/bin/sh", "-c", NEVER_READY],
        "labels": labels,
    }
    runtime = CompetingRuntime(
        docker_client, scope=scope, files_dir=tmp_path / "files", competitor=competitor
    )
    try:
        preset = busybox_preset(tmp_path, "dup", busybox_image, serving())
        with pytest.raises(LaunchError) as info:
            runtime.start(preset.container_spec())
        names = {"name": runtime.container_name("dup")}  # still there, still running
        assert [c["Id"] for c in docker_client.api.containers(filters=names)] == [runtime.made.id]
        assert "appeared while this launch created its own" in str(info.value)
    finally:
        if runtime.made is not None:
            try:
                runtime.made.remove(force=True)
            except docker.errors.NotFound:
                pass  # removed by the launch: the failure above says so
        remove_scope(docker_client, scope)


def test_a_running_engine_under_the_name_is_refused_not_removed(
    runtime, docker_client, scope, tmp_path, busybox_image
):
    spec = busybox_preset(tmp_path, "twice", busybox_image, NEVER_READY).container_spec()
    first = runtime.start(spec)
    with pytest.raises(LaunchError) as info:
        runtime.start(spec)  # another launch's engine, running: not ours to remove here
    assert "is running" in str(info.value)
    assert alive_ids(docker_client, scope) == [first.container_id]
    # a leftover that is not running (crashed, or created by a launch killed mid-way) goes
    docker_client.containers.get(first.container_id).kill()
    second = runtime.start(spec)
    assert [c.id for c in scope_containers(docker_client, scope)] == [second.container_id]


# ----- item 7: the truth after Ctrl-C, twice ---------------------------------------------------


@pytest.mark.in_process_owner(
    "the second Ctrl-C's kill is the in-process launch's; through the service it stops "
    "waiting (the next test)"
)
def test_second_ctrl_c_kills_the_engine_and_says_so(
    cli_env, isolated_dirs, scope, docker_client, busybox_image
):
    cli_preset(isolated_dirs, "stubborn", busybox_image, IGNORES_TERM)
    errors = (isolated_dirs["data"].parent / "stderr.txt").open("w+")
    proc = subprocess.Popen(
        cli("launch", "stubborn", *LAUNCH_FLAGS, "--timeout", "300"),
        env=cli_env,
        stdout=subprocess.PIPE,
        stderr=errors,
        text=True,
        stdin=subprocess.DEVNULL,
    )
    lines: list[str] = []
    assert proc.stdout is not None
    reader = threading.Thread(target=lambda: lines.extend(proc.stdout), daemon=True)
    reader.start()

    def wait_line(prefix: str, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if any(line.startswith(prefix) for line in lines):
                return True
            time.sleep(0.05)
        return False

    try:
        assert wait_line("started sparkdeck-", 60), lines  # (not "started the ... service")
        (engine_id,) = alive_ids(docker_client, scope)
        engine = docker_client.containers.get(engine_id)
        proc.send_signal(signal.SIGINT)
        # the graceful stop begins (30 s: its PID 1 ignores SIGTERM); say so, then Ctrl-C again
        wait_line("stopping ", 15)
        time.sleep(1.0)
        proc.send_signal(signal.SIGINT)
        proc.wait(timeout=30)
    finally:
        proc.kill()
    reader.join(timeout=5)
    out = "".join(lines)
    errors.seek(0)
    stderr = errors.read()
    assert proc.returncode == 1, (out, stderr)
    assert "Traceback" not in stderr, stderr
    left = [c for c in scope_containers(docker_client, scope) if c.id == engine.id]
    if left:  # whatever is left, the message must say it as it is
        assert left[0].status != "running" or "STILL RUNNING" in stderr, (out, stderr)
    assert alive(docker_client, scope) == [], (out, stderr)  # never an unguarded orphan
    assert f"second Ctrl-C: killing {engine.name} now" in out
    assert f"its container {engine.name} was stopped and removed" in stderr
    assert "no sparkdeck engine is running now" in stderr
    # the switch had nothing to stop, but the start was begun: the failure is kept
    assert last_failure() is not None and "interrupted" in last_failure()["message"]


def test_second_ctrl_c_through_the_service_stops_waiting_and_the_service_cancels(
    cli_env, isolated_dirs, scope, docker_client, busybox_image
):
    """With the service running the launch, a second Ctrl-C ends the command at once and
    says the service goes on cancelling; the service answers (it is not called lost, nor the
    engine unguarded) and stops what the cancelled launch started."""
    cli_preset(isolated_dirs, "stubborn", busybox_image, IGNORES_TERM)
    proc = subprocess.Popen(
        cli("launch", "stubborn", *LAUNCH_FLAGS, "--timeout", "300"),
        env=cli_env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        stdin=subprocess.DEVNULL,
    )
    lines: list[str] = []
    assert proc.stdout is not None
    reader = threading.Thread(target=lambda: lines.extend(proc.stdout), daemon=True)
    reader.start()
    try:
        wait_for(
            lambda: any(line.startswith("started sparkdeck-") for line in lines),
            timeout=60,
            what=lambda: f"the engine's start, in {lines}",
        )
        proc.send_signal(signal.SIGINT)
        time.sleep(1.0)
        proc.send_signal(signal.SIGINT)
        _, stderr = proc.communicate(timeout=30)
    finally:
        proc.kill()
    assert proc.returncode == 1 and "Traceback" not in stderr, stderr
    assert "stopped waiting: the service goes on cancelling the launch" in stderr, stderr
    assert "stopped answering" not in stderr and "no memory guard" not in stderr, stderr
    service = FileLock("service").held_by()
    assert (
        service is not None
        and json.loads(run_cli("service", "status", "--json", env=cli_env).stdout)["running"]
    )
    # its PID 1 ignores SIGTERM: the cancel's stop waits out the grace, then kills it
    wait_for(
        lambda: alive(docker_client, scope) == [],
        timeout=90,
        what="the service to stop what the cancelled launch started",
    )
