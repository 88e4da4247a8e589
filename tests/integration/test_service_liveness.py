"""Everyone can tell when the service is not there: a stopped (SIGSTOP) or killed service,
on a real Docker daemon with the real llama-server engine.

- a stopped service is called NOT ANSWERING within liveness.HEARTBEAT_S (2 s) with a CPU
  hog beside the run, by `service status` (exit 4) and by `status` (UNGUARDED);
- `sparkdeck guard` says so within 2 s and guards the engine with its own watchdog: a real
  bounded memory hog then makes *it* stop the engine while the service is stopped;
- a window's guard line turns to the warning colour within 2 s and hands back when the
  service answers again;
- a killed service is started again by the next `status`, guards the engine, and has
  oom_score_adj -500.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from sparkdeck.service.liveness import HEARTBEAT_S, NOT_ANSWERING, probe
from tests.conftest import scope_containers
from tests.support.cli import run_cli, wait_for
from tests.support.cpu_hog import cpu_hog
from tests.support.memory_hog import MemoryHog, stop_line_below_a_hog
from tests.support.paused_process import state_of, stopped
from tests.support.service_env import (  # noqa: F401 - service_env is a fixture
    client_for,
    service_env,
    service_pid,
    tiny_preset,
)

pytestmark = [pytest.mark.docker, pytest.mark.llama]


def launched_engine(service_env, isolated_dirs, docker_client, scope, llama_image):
    tiny_preset(isolated_dirs, llama_image)
    launched = run_cli("launch", "svc-tiny", "--no-flush", "--timeout", "60", env=service_env)
    assert launched.returncode == 0, launched.stderr
    (container,) = scope_containers(docker_client, scope)
    pid = service_pid(service_env)
    assert pid is not None
    with client_for(service_env) as client:
        wait_for(
            lambda: client.status()["guard"]["guarding"] == container.name,
            timeout=30,
            what="the service guarding the engine",
        )
    return container, pid


def test_a_stopped_service_is_not_answering_within_2_s_and_the_engine_unguarded(
    service_env, isolated_dirs, scope, docker_client, llama_image, monkeypatch
):
    _container, pid = launched_engine(service_env, isolated_dirs, docker_client, scope, llama_image)
    monkeypatch.setenv("SPARKDECK_SERVICE", "auto")
    assert probe().answering
    with cpu_hog(), stopped(pid):
        began = time.monotonic()
        life = probe()
        took = time.monotonic() - began
        assert life.state == NOT_ANSWERING and life.pid == pid
        assert "stopped (SIGSTOP)" in life.detail
        assert took <= HEARTBEAT_S, f"{took:.2f} s"
        service = run_cli("service", "status", env=service_env, timeout=60)
        assert service.returncode == 4, service.stdout + service.stderr
        assert "NOT ANSWERING" in service.stdout and f"process {pid}" in service.stdout
        status = run_cli("status", env=service_env, timeout=60)
        assert status.returncode == 0, status.stderr
        guard_line = next(line for line in status.stdout.splitlines() if line.startswith("guard:"))
        assert "UNGUARDED" in guard_line and "not answering" in guard_line
        assert "svc-tiny" in guard_line
    assert wait_for(lambda: probe().answering, timeout=10, what="the service answering again")
    print(f"a stopped service told in {took:.2f} s with a CPU hog beside it")


def test_sparkdeck_guard_takes_over_from_a_stopped_service_and_stops_the_engine(
    service_env, isolated_dirs, scope, docker_client, llama_image
):
    hog_size, _ = stop_line_below_a_hog(isolated_dirs["config"])
    _container, pid = launched_engine(service_env, isolated_dirs, docker_client, scope, llama_image)
    guard = subprocess.Popen(
        [sys.executable, "-m", "sparkdeck", "guard", "--json"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**service_env, "PYTHONUNBUFFERED": "1"},
    )
    assert guard.stdout is not None
    events: list[dict] = []

    def next_event(until: str) -> tuple[dict, float]:
        for line in guard.stdout:
            event = json.loads(line)
            events.append(event)
            if event.get("event") == until:
                return event, time.monotonic()
        raise AssertionError(f"`sparkdeck guard` ended before {until!r}: {events}")

    try:
        next_event("decision")  # relayed: the service guards, the command shows it
        with stopped(pid) as stopped_at, MemoryHog(hog_size) as hog:
            silent, told_at = next_event("unguarded")
            assert told_at - stopped_at <= HEARTBEAT_S, f"{told_at - stopped_at:.2f} s"
            assert "not answering" in silent["text"] and "stopped (SIGSTOP)" in silent["text"]
            hog.allocate()
            wait_for(
                lambda: scope_containers(docker_client, scope) == [],
                timeout=60,
                what="the command's own watchdog stopping the engine",
            )
            # the service never moved: the stop was this command's
            assert state_of(pid) == "T"
        guard.wait(timeout=30)
    finally:
        if guard.poll() is None:
            guard.kill()
            guard.wait()
    rest = guard.stdout.read()
    events += [json.loads(line) for line in rest.splitlines() if line.strip()]
    decisions = [e for e in events if "level" in e and e.get("event") is None]
    assert any(d["level"] == "stop" for d in decisions), events  # its own decisions
    assert any(e.get("event") == "stop attempt" and e.get("done") for e in events), events
    assert guard.returncode == 1  # "stopped <engine>: ..." as with its own watchdog before
    actions = [
        json.loads(p.read_text())["action"]
        for p in (isolated_dirs["data"] / "guard-actions").glob("*.json")
    ]
    assert "stopping" in actions and "stopped" in actions
    print(
        f"`sparkdeck guard` said the service was not answering "
        f"{told_at - stopped_at:.2f} s after SIGSTOP"
    )


@pytest.mark.anyio
async def test_a_windows_guard_line_warns_within_2_s_and_hands_back(
    service_env, isolated_dirs, scope, docker_client, llama_image, monkeypatch
):
    from sparkdeck.catalog import load_catalog
    from sparkdeck.config.settings import Settings
    from sparkdeck.runtime import connect
    from sparkdeck.ui.app import SparkdeckApp
    from sparkdeck.ui.guard.watchdog_line import WatchdogLine
    from tests.support.pane_host import wait_until

    _container, pid = launched_engine(service_env, isolated_dirs, docker_client, scope, llama_image)
    monkeypatch.setenv("SPARKDECK_SERVICE", "auto")
    monkeypatch.setenv("SPARKDECK_SCOPE", scope)
    app = SparkdeckApp(
        load_catalog, connect, settings=Settings(), flush=False, engine_poll_seconds=0.5
    )

    def line() -> WatchdogLine:
        return app.query_one(WatchdogLine)

    async def scenario() -> float:
        async with app.run_test(size=(120, 40)) as pilot:
            await wait_until(
                pilot,
                lambda: "memory guard (service)" in str(line().render()),
                timeout=20.0,
                what="the line relaying the service's decisions",
            )
            with stopped(pid) as stopped_at:
                # first "the service is not answering ... THIS WINDOW guards it", then this
                # window's own decisions under "(this window; the service does not answer)"
                await wait_until(
                    pilot,
                    lambda: (
                        line().has_class("-warn")
                        and (
                            "THIS WINDOW" in str(line().render())
                            or "the service does not answer" in str(line().render())
                        )
                    ),
                    timeout=HEARTBEAT_S + 0.5,
                    what="the line saying so",
                )
                told = time.monotonic() - stopped_at
                # this window's own watchdog guards meanwhile: its readings come in
                own = line()._watchdog
                assert own is not None
                await wait_until(
                    pilot,
                    lambda: len(own.window) >= 2,
                    timeout=5.0,
                    what="the window's own watchdog reading the host",
                )
                assert "(this window; the service does not answer)" in str(line().render())
            await wait_until(
                pilot,
                lambda: "memory guard (service)" in str(line().render()),
                timeout=10.0,
                what="the line handing back to the service",
            )
            assert not line().has_class("-warn")
            return told

    told = await scenario()
    assert told <= HEARTBEAT_S, f"{told:.2f} s"
    print(f"the guard line warned {told:.2f} s after SIGSTOP")


def test_a_killed_service_is_started_again_by_status_with_a_low_oom_score(
    service_env, isolated_dirs, scope, docker_client, llama_image
):
    container, pid = launched_engine(service_env, isolated_dirs, docker_client, scope, llama_image)
    lowered = oom_score_may_be_lowered()
    assert_oom_score(pid, lowered, isolated_dirs["data"] / "service.log")
    os.kill(pid, signal.SIGKILL)
    wait_for(
        lambda: not os.path.exists(f"/proc/{pid}/stat") or state_of(pid) == "Z",
        timeout=10,
        what="the service gone",
    )
    status = run_cli("status", env=service_env, timeout=60)
    assert status.returncode == 0, status.stderr
    guard_line = next(line for line in status.stdout.splitlines() if line.startswith("guard:"))
    assert "was not running" in guard_line and "started it again" in guard_line, guard_line
    new = service_pid(service_env)
    assert new is not None and new != pid and f"process {new}" in guard_line
    with client_for(service_env) as client:
        wait_for(
            lambda: client.status()["guard"]["guarding"] == container.name,
            timeout=30,
            what="the new service guarding the engine",
        )
    assert_oom_score(new, lowered, isolated_dirs["data"] / "service.log")


def oom_score_may_be_lowered() -> bool:
    """Whether this machine lets a process lower its own OOM score (CAP_SYS_RESOURCE: root
    outside a container that drops it; some sandboxes refuse even root)."""
    script = (
        "with open('/proc/self/oom_score_adj', 'w') as adj: adj.write('-500')\n"
        "assert open('/proc/self/oom_score_adj').read().strip() == '-500'"
    )
    return subprocess.run([sys.executable, "-c", script], capture_output=True).returncode == 0


def assert_oom_score(pid: int, lowered: bool, log: Path) -> None:
    """-500 where the machine allows it; where it does not, the service's log says why."""
    with open(f"/proc/{pid}/oom_score_adj") as adj:
        score = adj.read().strip()
    if lowered:
        assert score == "-500"
    else:
        said = [line for line in log.read_text().splitlines() if f"service {pid} " in line]
        assert said and "oom_score_adj left as it was" in said[-1], said
