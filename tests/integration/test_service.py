"""The sparkdeck service on a real Docker daemon with the real llama-server image.

`sparkdeck launch` starts the service when none runs; the CLI ends and the service keeps
guarding the engine: a real (bounded) memory hog then makes the service stop the engine
with no front end open. One launch at a time; kill -9 of the service never leaves two
engines; the socket refuses another user; another API version gets a clear message.
"""

from __future__ import annotations

import json
import os
import signal
import time

import pytest

from sparkdeck.host.meminfo import read_meminfo
from sparkdeck.service.client import ServiceClient, ServiceError
from tests.conftest import (
    scope_containers,
)
from tests.support.cli import run_cli, wait_for
from tests.support.memory_hog import MemoryHog, stop_line_below_a_hog
from tests.support.service_env import (  # noqa: F401 - service_env is a fixture
    client_for,
    service_env,
    service_pid,
    tiny_preset,
)

pytestmark = [pytest.mark.docker, pytest.mark.llama]
GIB = 2**30


def _history(env: dict[str, str]) -> list[dict]:
    """The flight recorder's rows of the last 5 minutes."""
    return json.loads(run_cli("history", "--json", "--since", "5m", env=env).stdout)["rows"]


def test_cli_launch_leaves_a_service_that_stops_the_engine_under_real_memory_pressure(
    service_env, isolated_dirs, scope, docker_client, llama_image
):
    """The CLI launches and exits; the service (started by that launch) keeps the watchdog
    on the engine; a real hog takes the host below the stop threshold and the service stops
    the engine with no front end open, writing the decision first."""
    hog_size, stop_pct = stop_line_below_a_hog(isolated_dirs["config"])
    tiny_preset(isolated_dirs, llama_image)

    launched = run_cli("launch", "svc-tiny", "--no-flush", "--timeout", "60", env=service_env)
    assert launched.returncode == 0, launched.stderr
    assert "started the sparkdeck service" in launched.stdout
    assert "ready in" in launched.stdout  # the launch's own lines, relayed by the service
    assert "the sparkdeck service guards" in launched.stdout
    (container,) = scope_containers(docker_client, scope)

    with client_for(service_env) as client:
        seen: list[dict] = []
        guard = wait_for(
            lambda: ((g := client.status()["guard"])["hz"] == 1.0 and g) or seen.append(g),
            timeout=60,
            what=lambda: f"the service guarding the ready engine at 1 Hz: {seen[-1:]}",
        )
        assert guard["guarding"] == container.name and guard["mode"] == "stop"
        # the flight recorder has a row of the ready engine before the hog: its row of the
        # engine's state may come a moment after the guard's (a parallel run's hog came
        # first, and no ready row was above the line)
        wait_for(
            lambda: any(r["engine_state"] == "svc-tiny ready" for r in _history(service_env)),
            timeout=15,
            every=0.5,
            what="the flight recorder's row of the ready engine",
        )
        with client.events() as events:
            assert next(events)[0] == "hello"
            with MemoryHog(hog_size) as hog:
                hogged_at = time.time()
                hog.allocate()
                stopped = None
                for kind, data in events:
                    if kind == "engine" and data["state"] == "stopped by the guard":
                        stopped = data
                        break
                # the flight recorder commits its rows every few seconds: its dip is read
                # while the hog still holds the memory (read at once, the last rows were
                # not on disk yet and the dip was missing)
                line = stop_pct / 100 * read_meminfo().total
                rows = wait_for(
                    lambda: (
                        (r := _history(service_env))
                        and min(x["mem_available"] for x in r) < line
                        and r
                    ),
                    timeout=15,
                    every=0.5,
                    what="the flight recorder's rows with the hog's dip",
                )
    assert stopped is not None and stopped["preset_id"] == "svc-tiny"
    assert scope_containers(docker_client, scope) == []
    actions = {}
    for path in sorted((isolated_dirs["data"] / "guard-actions").glob("*.json")):
        record = json.loads(path.read_text())
        actions.setdefault(record["action"], record)
    stopping = actions["stopping"]
    assert stopping["engine"] == container.name
    # the decision came from readings below the line that the hog made the difference for
    # (without its memory the host was above the line): not another process's doing
    last = stopping["window"][-1]
    threshold = stop_pct / 100 * last["total"]
    assert last["available"] < threshold < last["available"] + 0.9 * hog_size
    assert "stopped" in actions
    # the flight recorder kept the engine's state and the dip, with no window open
    ready = [r for r in rows if r["engine_state"] == "svc-tiny ready"]
    assert ready, [r["engine_state"] for r in rows]
    assert min(r["mem_available"] for r in rows) < threshold
    assert max(r["mem_available"] for r in ready) > threshold  # before the hog: above it
    print(
        f"hog {hog_size / GIB:.2f} GiB; stopped "
        f"{time.time() - hogged_at:.1f} s after it started allocating"
    )


def test_a_second_launch_during_one_in_flight_is_refused(
    service_env, isolated_dirs, scope, docker_client, llama_image
):
    tiny_preset(isolated_dirs, llama_image, "svc-a")
    tiny_preset(isolated_dirs, llama_image, "svc-b")
    assert run_cli("service", "start", env=service_env).returncode == 0
    with client_for(service_env) as client, client.events() as events:
        assert next(events)[0] == "hello"
        first = client.launch("svc-a", flush="no", timeout=60)
        with pytest.raises(ServiceError) as refused:
            client.launch("svc-b", flush="no", timeout=60)
        assert refused.value.status == 409
        assert "a launch of svc-a is in progress" in str(refused.value)
        result = next(d for k, d in events if k == "launch-result" and d["launch"] == first)
    assert result["ok"], result
    assert [c.labels["io.sparkdeck.preset"] for c in scope_containers(docker_client, scope)] == [
        "svc-a"
    ]


def launched(client: ServiceClient, preset: str) -> dict:
    """Launch through the service and wait for the launch's result event (the stream is
    open before the launch is asked for, so the result cannot be missed)."""
    with client.events() as events:
        assert next(events)[0] == "hello"
        launch_id = client.launch(preset, flush="no", timeout=60)
        return next(d for k, d in events if k == "launch-result" and d["launch"] == launch_id)


def alive_containers(docker_client, scope: str) -> list:
    return [c for c in scope_containers(docker_client, scope) if c.status == "running"]


def test_kill9_of_the_service_mid_run_and_mid_launch_never_leaves_two_engines(
    service_env, isolated_dirs, scope, docker_client, llama_image
):
    tiny_preset(isolated_dirs, llama_image, "svc-a")
    tiny_preset(isolated_dirs, llama_image, "svc-b")
    assert run_cli("service", "start", env=service_env).returncode == 0
    with client_for(service_env) as client:
        assert launched(client, "svc-a")["ok"]
    (engine_a,) = alive_containers(docker_client, scope)

    # mid-run: the engine runs on; a new service adopts it and guards it within a second
    os.kill(service_pid(service_env), signal.SIGKILL)
    assert run_cli("service", "start", env=service_env).returncode == 0
    with client_for(service_env) as client:
        wait_for(
            lambda: client.status()["guard"]["guarding"] == engine_a.name,
            timeout=5,
            what="the new service guarding the running engine",
        )

        # mid-launch: killed once the new engine's container has started (the old one is
        # stopped by then); what is left is at most one engine, and the restarted service
        # guards it; the next launch ends with exactly one
        time.sleep(4)  # the recorder commits every 3 s: this service's rows are on disk
        with client.events() as events:
            assert next(events)[0] == "hello"
            client.launch("svc-b", flush="no", timeout=60)
            next(
                d
                for k, d in events
                if k == "launch-event" and d["event"]["type"] == "ContainerStarted"
            )
            os.kill(client.status()["pid"], signal.SIGKILL)
    killed_at = time.time()
    # killed once svc-b's container had started, and svc-a was stopped before it: svc-b alone
    left = alive_containers(docker_client, scope)
    assert [c.labels["io.sparkdeck.preset"] for c in left] == ["svc-b"], [c.name for c in left]
    assert run_cli("service", "start", env=service_env).returncode == 0
    with client_for(service_env) as client:
        # the kill is noticed: a post-mortem of the run that did not end cleanly, whose
        # recording reaches to within a few seconds of the kill
        postmortem = client.status()["postmortem"]
        assert postmortem is not None and "without a clean stop" in postmortem["cause"]
        assert not postmortem["rebooted"]
        assert killed_at - postmortem["ended_at"] <= 5.0, killed_at - postmortem["ended_at"]
        wait_for(
            lambda: client.status()["guard"]["guarding"] == left[0].name,
            timeout=5,
            what="the restarted service guarding what the killed launch started",
        )
        result = launched(client, "svc-a")
    assert result["ok"], result
    assert [c.labels["io.sparkdeck.preset"] for c in alive_containers(docker_client, scope)] == [
        "svc-a"
    ]


@pytest.mark.anyio
async def test_a_window_and_the_cli_see_the_service_guard_the_same_engine(
    service_env, isolated_dirs, scope, docker_client, llama_image, monkeypatch
):
    """Two clients at once: a TUI (Pilot) and the CLI. The TUI's guard line shows the
    service's decisions instead of running a watchdog of its own; `sparkdeck service status`
    names the same engine and the same level."""

    from sparkdeck.catalog import load_catalog
    from sparkdeck.config.settings import Settings
    from sparkdeck.runtime import connect
    from sparkdeck.ui.app import SparkdeckApp
    from sparkdeck.ui.guard.watchdog_line import WatchdogLine
    from tests.support.pane_host import wait_until

    tiny_preset(isolated_dirs, llama_image)
    assert (
        run_cli("launch", "svc-tiny", "--no-flush", "--timeout", "60", env=service_env).returncode
        == 0
    )
    monkeypatch.setenv("SPARKDECK_SERVICE", "auto")
    monkeypatch.setenv("SPARKDECK_SCOPE", scope)
    app = SparkdeckApp(
        load_catalog, connect, settings=Settings(), flush=False, engine_poll_seconds=0.5
    )

    def line() -> str:
        return str(app.query_one(WatchdogLine).render())

    async def scenario() -> None:
        async with app.run_test(size=(120, 40)) as pilot:
            await wait_until(
                pilot,
                lambda: "memory guard (service)" in line(),
                timeout=20.0,
                what="the guard line relaying the service's decisions",
            )
            # no second watchdog: this window's own (built, on standby) never took a reading
            own = app.query_one(WatchdogLine)._watchdog
            assert own is not None and len(own.window) == 0

    await scenario()
    status = json.loads(run_cli("service", "status", "--json", env=service_env).stdout)
    (container,) = scope_containers(docker_client, scope)
    assert status["guard"]["guarding"] == container.name
    assert status["guard"]["last_decision"]["level"] == "ok"


def test_sparkdeck_guard_shows_the_services_decisions_instead_of_a_second_watchdog(
    service_env, isolated_dirs, scope, docker_client, llama_image
):
    tiny_preset(isolated_dirs, llama_image)
    assert (
        run_cli("launch", "svc-tiny", "--no-flush", "--timeout", "60", env=service_env).returncode
        == 0
    )
    watched = run_cli("guard", "--duration", "4", "--json", env=service_env)
    assert watched.returncode == 0, watched.stderr
    lines = [json.loads(line) for line in watched.stdout.splitlines()]
    assert "the sparkdeck service (process" in lines[0]["text"]
    decisions = [line for line in lines if line["event"] == "decision"]
    assert len(decisions) >= 2 and all(d["level"] == "ok" for d in decisions)
    # and no second watchdog wrote anything: the service's records are all there are
    assert not list((isolated_dirs["data"] / "guard-actions").glob("*.json"))


@pytest.mark.anyio
async def test_a_window_that_finds_an_engine_unguarded_starts_the_service(
    service_env, isolated_dirs, scope, docker_client, llama_image, monkeypatch
):
    """An engine launched with the service off (an older sparkdeck, a script) and a window
    opened on it: the window starts the service, which guards the engine after it closes."""

    from sparkdeck.catalog import load_catalog
    from sparkdeck.config.settings import Settings
    from sparkdeck.runtime import connect
    from sparkdeck.ui.app import SparkdeckApp
    from sparkdeck.ui.guard.watchdog_line import WatchdogLine
    from tests.support.pane_host import wait_until

    tiny_preset(isolated_dirs, llama_image)
    launched = run_cli(
        "launch",
        "svc-tiny",
        "--no-flush",
        "--timeout",
        "60",
        env={**service_env, "SPARKDECK_SERVICE": "off"},
    )
    assert launched.returncode == 0, launched.stderr
    assert service_pid(service_env) is None
    monkeypatch.setenv("SPARKDECK_SERVICE", "auto")
    monkeypatch.setenv("SPARKDECK_SCOPE", scope)
    app = SparkdeckApp(
        load_catalog, connect, settings=Settings(), flush=False, engine_poll_seconds=0.5
    )

    async def scenario() -> None:
        async with app.run_test(size=(120, 40)) as pilot:
            await wait_until(
                pilot,
                lambda: "memory guard (service)" in str(app.query_one(WatchdogLine).render()),
                timeout=30.0,
                what="the window's guard line relaying the service it started",
            )

    await scenario()
    (container,) = scope_containers(docker_client, scope)
    with client_for(service_env) as client:  # the window is closed: the service guards on
        wait_for(
            lambda: client.status()["guard"]["guarding"] == container.name,
            timeout=10,
            what="the service guarding the engine after the window closed",
        )
