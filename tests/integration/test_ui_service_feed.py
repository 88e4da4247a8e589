"""A window connected to the sparkdeck service draws what the service reads (the machine's
telemetry, Docker's word on the engine, the engine's metrics) and reads none of it itself;
while the service does not answer, it reads them again. Real Docker daemon, real llama-server
engine, a real service process; the window's own readers are the real ones, wrapped to count
their calls."""

from __future__ import annotations

import itertools
import os
import signal
import threading

import pytest

from tests.support.cli import run_cli
from tests.support.service_env import (  # noqa: F401 - a fixture
    client_for,
    follow_service,
    service_env,
    service_pid,
    tiny_preset,
)

pytestmark = [pytest.mark.docker, pytest.mark.llama]
WINDOW_S = 4.0  # the window watched idle: four of the service's telemetry samples


@pytest.mark.anyio
async def test_a_connected_window_draws_the_services_readings_and_reads_nothing_itself(
    service_env, isolated_dirs, scope, docker_client, llama_image, monkeypatch
):
    from sparkdeck.catalog import load_catalog
    from sparkdeck.config.settings import Settings
    from sparkdeck.host.meminfo import read_meminfo
    from sparkdeck.runtime.client import DockerRuntime
    from sparkdeck.service.guard_events import ServiceDecided
    from sparkdeck.telemetry.sampler import TelemetrySampler
    from sparkdeck.ui.app import SparkdeckApp
    from sparkdeck.ui.dashboard.side_tabs import Sampling
    from sparkdeck.ui.guard.watchdog_line import WatchdogLine
    from sparkdeck.ui.machine.tab import MachineTab
    from sparkdeck.ui.metrics.tab import MetricsTab
    from sparkdeck.ui.readers import EngineReading
    from tests.support.offline_app import engine_text, text_of
    from tests.support.pane_host import wait_until

    tiny_preset(isolated_dirs, llama_image, "feed-tiny")
    assert run_cli("service", "start", env=service_env).returncode == 0
    launched = run_cli("launch", "feed-tiny", "--no-flush", "--yes", env=service_env, timeout=120)
    assert launched.returncode == 0, launched.stderr
    seen: list[tuple[str, dict]] = []
    done = threading.Event()
    follow_service(service_env, seen, done)
    monkeypatch.setenv("SPARKDECK_SERVICE", "auto")
    monkeypatch.setenv("SPARKDECK_SCOPE", scope)

    memory_reads: list[float] = []  # the window's own /proc/meminfo reads
    docker_reads: list[object] = []  # the window's own "which engine runs?" asks of Docker

    def counted_meminfo():
        memory_reads.append(1)
        return read_meminfo()

    def counted_runtime() -> DockerRuntime:
        runtime = DockerRuntime.connect(scope=scope)
        current = runtime.current

        def counted_current():
            docker_reads.append(1)
            return current()

        runtime.current = counted_current  # type: ignore[method-assign]
        return runtime

    drawn: list[float] = []  # taken_at of every sample the machine tab drew
    rated: list[float] = []  # wall of every engine-metrics reading the metrics tab took

    guard_decisions: list[object] = []  # the service's decisions, as the guard line got them

    def hook(message) -> None:
        if isinstance(message, WatchdogLine.Guarded) and isinstance(message.event, ServiceDecided):
            guard_decisions.append(message.event)
        elif isinstance(message, MachineTab.TelemetrySampled):
            drawn.append(message.snapshot.taken_at)
        elif isinstance(message, MetricsTab.TrailSampled) and message.trail:
            rated.append(message.trail[-1].wall)

    app = SparkdeckApp(
        load_catalog,
        counted_runtime,
        settings=Settings(),
        flush=False,
        engine_poll_seconds=0.5,
        sampling=Sampling(TelemetrySampler(memory=counted_meminfo)),
    )

    def service_samples() -> set[float]:
        return {data["taken_at"] for kind, data in seen if kind == "telemetry"}

    def service_metrics() -> set[float]:
        return {data["reading"]["wall"] for kind, data in seen if kind == "metrics"}

    def memory_panel() -> str:
        return text_of(app.query_one("#memory-bars"))

    async def scenario() -> None:
        async with app.run_test(size=(120, 40), message_hook=hook) as pilot:
            await wait_until(
                pilot,
                lambda: "state    ready" in engine_text(app) and "feed-tiny" in engine_text(app),
                timeout=30,
                what=lambda: f"the engine ready on the card, not {engine_text(app)!r}",
            )
            await wait_until(pilot, lambda: len(drawn) >= 2, what="two samples drawn")
            await wait_until(pilot, lambda: len(rated) >= 2, what="two metrics readings")
            before, rated_before = len(drawn), len(rated)
            await pilot.pause(WINDOW_S)
            # The machine tab drew the service's samples (the same instants, read by the
            # service's sampler) at the service's rate, and the window read neither /proc
            # nor Docker, from its start on. (The first sample drawn is the service's latest
            # at connection, published before this test's own stream began.)
            assert len(drawn) - before >= WINDOW_S - 1, drawn
            assert len(rated) - rated_before >= WINDOW_S - 1, rated
            # the test's own stream of the service's events (a thread) may be a moment behind
            # the window: beside load, the newest sample drawn was not in it yet. A sample the
            # window read itself never comes on the stream, and counts as a read below.
            drawn_now, rated_now = drawn[1:], rated[rated_before:]
            await wait_until(
                pilot,
                lambda: set(drawn_now) <= service_samples() and set(rated_now) <= service_metrics(),
                timeout=3.0,
                what=lambda: (
                    f"the service's own instants: drawn {drawn_now}, the service's "
                    f"{sorted(service_samples())}; rated {rated_now}, {service_metrics()}"
                ),
            )
            assert memory_reads == [] and docker_reads == [], (memory_reads, docker_reads)
            assert "available" in memory_panel() and "GiB" in memory_panel(), memory_panel()
            # the guard line relays the service's decisions from the same stream: the
            # service has two subscribers, this test's and the window's one (a relay of its
            # own was a second stream and a second thread waking every second)
            await wait_until(
                pilot,
                lambda: "memory guard (service)" in text_of(app.query_one("#watchdog-line")),
                what="the guard line relaying the service's decisions",
            )
            decided = len(guard_decisions)
            await pilot.pause(2.5)
            assert len(guard_decisions) - decided >= 2, guard_decisions
            with client_for(service_env) as client:
                assert client.status()["subscribers"] == 2
            reading = app.docker
            assert isinstance(reading, EngineReading) and reading.status == "ready", reading
            assert reading.engine is not None and reading.engine.preset_id == "feed-tiny"

            # The service stops answering (SIGSTOP): the window reads the machine and Docker
            # itself again, and draws what it reads.
            pid = service_pid(service_env)
            assert pid is not None
            os.kill(pid, signal.SIGSTOP)
            try:
                await wait_until(
                    pilot,
                    lambda: (
                        len(set(drawn[1:]) - service_samples()) >= 2
                        and len(set(rated) - service_metrics()) >= 2
                        and docker_reads
                    ),
                    timeout=10,
                    what=lambda: (
                        f"own readings drawn: {len(memory_reads)} memory reads, "
                        f"{len(docker_reads)} Docker, metrics {rated} ({service_metrics()})"
                    ),
                )
                assert len(memory_reads) >= 2
                assert "state    ready" in engine_text(app), engine_text(app)
            finally:
                os.kill(pid, signal.SIGCONT)
            # It answers again: the window follows it again and stops reading for itself.
            await wait_until(pilot, lambda: app.service_feed.live, what="the feed back")
            await pilot.pause(1.5)  # a sample of its own may be under way at the switch
            reads = (len(memory_reads), len(docker_reads))
            await pilot.pause(WINDOW_S)
            assert (len(memory_reads), len(docker_reads)) == reads, "it still reads itself"

    try:
        await scenario()
    finally:
        done.set()
    # the service sampled the engine's metrics each second all along, and its log says
    # nothing of each request (httpx's INFO lines filled the 3 MiB of log in hours)
    log = (isolated_dirs["data"] / "service.log").read_text()
    assert "sparkdeck service" in log and "HTTP Request" not in log, log[-2000:]


@pytest.mark.anyio
async def test_a_filtered_subscription_gets_the_latest_of_its_kinds_first_and_only_its_kinds():
    """What a window's feed asks of the service's hub: the latest reading of each kind it
    draws at once (it has something to draw before the next sample), then only those kinds
    (a guard decision or a launch step never wakes it)."""
    import anyio

    from sparkdeck.service.hub import EventHub

    hub = EventHub()
    hub.publish("telemetry", n=1)
    hub.publish("telemetry", n=2)
    hub.publish("guard", level="ok")
    events = hub.subscribe(replay=["telemetry", "docker"], kinds=frozenset({"telemetry"}))
    got = [await anext(events)]  # subscribed now: what is published next reaches it
    hub.publish("guard", level="warn")
    hub.publish("note", text="x")
    hub.publish("telemetry", n=3)
    with anyio.fail_after(5):
        got.append(await anext(events))
    await events.aclose()
    assert [(e.kind, e.data) for e in got] == [("telemetry", {"n": 2}), ("telemetry", {"n": 3})]
    assert hub.subscribers == 0  # the stream's end ends its subscription


NO_SERVICE_APP = """
import asyncio, json, sys
from pathlib import Path
from sparkdeck.catalog import PresetCatalog
from sparkdeck.runtime.errors import DockerUnavailable
from sparkdeck.ui.app import SparkdeckApp

class App(SparkdeckApp):
    CSS_PATH = str(Path(sys.modules["sparkdeck.ui.app"].__file__).with_name("sparkdeck.tcss"))

def no_docker():
    raise DockerUnavailable("no Docker in this test")

async def main():
    app = App(lambda: PresetCatalog({}, []), no_docker, engine_poll_seconds=3600)
    async with app.run_test(size=(120, 40)) as pilot:
        app.service_feed.first_look(10)
        await pilot.pause(2.5)  # the feed's next look for a service too (RETRY_S)
        print(json.dumps({"httpx": "httpx" in sys.modules and sys.modules["httpx"] is not None,
                          "live": app.service_feed.live}))

asyncio.run(main())
"""


def test_a_window_with_no_service_running_loads_no_http_client(tmp_path, isolated_dirs):
    """The feed looks for the service's socket every RETRY_S; while there is none it loads
    nothing (httpx alone is ~7 MiB of the window's 60 MiB:
    tests/integration/test_ui_idle_imports.py)."""
    import json
    import subprocess
    import sys

    script = tmp_path / "no_service_app.py"  # a file: Textual reads the app class's source path
    script.write_text(NO_SERVICE_APP)
    env = {**os.environ, "SPARKDECK_SERVICE": "auto"}  # on, but none runs on this socket
    result = subprocess.run(
        [sys.executable, str(script)], env=env, capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stderr[-3000:]
    seen = json.loads(result.stdout.strip().splitlines()[-1])
    assert seen == {"httpx": False, "live": False}, seen


def test_the_guard_relays_stream_carries_only_the_guards_kinds_and_replays_nothing(
    service_env, isolated_dirs, llama_image
):
    """The guard line's (and `sparkdeck guard`'s) stream from the service: with an engine
    up, the service sends it the guard's decisions (one a second, so its 1.3 s silence test
    never trips) and no telemetry or metrics events (several a second, each parsed only to be
    dropped: 12 % of an idle window's CPU); and it replays no earlier event, so an earlier
    engine's "stopped by the guard" never reaches a line that follows a new one."""
    import time

    from sparkdeck.service import relay
    from sparkdeck.service.client import KEEP_ALIVE
    from sparkdeck.service.guard_events import ServiceDecided

    tiny_preset(isolated_dirs, llama_image, "relay-tiny")
    assert run_cli("service", "start", env=service_env).returncode == 0
    launched = run_cli("launch", "relay-tiny", "--no-flush", "--yes", env=service_env, timeout=120)
    assert launched.returncode == 0, launched.stderr
    with client_for(service_env) as client, client.events(kinds=("engine",)) as events:
        latest_engine = next(data for kind, data in events if kind == "engine")

    arrivals: list[tuple[float, str, dict]] = []
    with client_for(service_env) as client:
        with client.events(
            read_timeout=relay.SILENCE_S, kinds=relay.GUARD_KINDS, replay=()
        ) as events:
            began = time.monotonic()
            for kind, data in events:
                arrivals.append((time.monotonic(), kind, data))
                if time.monotonic() - began > 4.0:
                    break
    kinds = {kind for _, kind, _ in arrivals}
    assert kinds <= {"hello", KEEP_ALIVE, *relay.GUARD_KINDS}, kinds
    assert sum(kind == "guard" for _, kind, _ in arrivals) >= 3, arrivals
    replayed = [d for _, kind, d in arrivals if "id" in d and d["id"] <= latest_engine["id"]]
    assert replayed == [], replayed
    gaps = [b[0] - a[0] for a, b in itertools.pairwise(arrivals[1:])]  # after the hello
    assert max(gaps) < relay.SILENCE_S, gaps

    # and the relay itself asks for that stream, and hands each decision on
    decided: list[object] = []
    done = threading.Event()
    threading.Timer(2.5, done.set).start()
    with client_for(service_env) as client:
        asked: list[dict] = []
        plain = client.events

        def spy(**kwargs):
            asked.append(kwargs)
            return plain(**kwargs)

        client.events = spy  # type: ignore[method-assign]
        assert relay.relay_guard(client, done, decided.append) is True
    assert asked == [{"read_timeout": relay.SILENCE_S, "kinds": relay.GUARD_KINDS, "replay": ()}]
    assert sum(isinstance(e, ServiceDecided) for e in decided) >= 2, decided
