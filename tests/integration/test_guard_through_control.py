"""A front end gets the engine's guard through EngineControl, on both paths (issue 31, item 1).

The same steps twice on the real Docker daemon with the real llama-server engine: the front
end asks engine_control() for the engine's owner, launches through it, then follows the
guard through the same control (`control.guard`) and only sees typed guard events. Once
with the service switched off (LocalControl: this process's watchdog guards and says so
first), once with the real service (ServiceControl: the service's watchdog guards, the
events are its decisions relayed, and this process's watchdog never reads a thing). In each
a real bounded memory hog takes MemAvailable below a stop line raised within 3 GiB of it
(sized when it allocates, as other work on this box moves MemAvailable by GiBs; the box is
never endangered), and the guard of that path stops the engine: the front end hears the
stop decision, the confirmed stop attempt and, from the service, the guard's stop. Then who
guards, as the service's control says it when the service is SIGSTOPped and let go (taken
over within 2 s, handed back), and the TUI's line following the guard through
LocalControl, whose toast names why it stopped the engine.
"""

from __future__ import annotations

import contextlib
import os
import queue
import signal
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from sparkdeck.catalog import load_catalog
from sparkdeck.config.settings import GuardSettings, load_settings
from sparkdeck.host.meminfo import read_meminfo
from sparkdeck.launch.plan import LaunchFlow
from sparkdeck.runtime import connect
from sparkdeck.service.control import LocalControl, ServiceControl, engine_control
from sparkdeck.service.guard_events import (
    Decided,
    GuardedHere,
    GuardEvent,
    GuardStopped,
    ServiceDecided,
    ServiceGuards,
    StopTried,
    TakenOver,
)
from sparkdeck.service.liveness import HEARTBEAT_S, NOT_ANSWERING
from tests.conftest import scope_containers
from tests.support.memory_hog import MemoryHog
from tests.support.paused_process import stopped
from tests.support.service_env import service_env, service_pid, tiny_preset  # noqa: F401 - a fixture

# alone: each crosses a line of host-wide memory with a hog, or times the 2 s promise
pytestmark = [pytest.mark.docker, pytest.mark.llama, pytest.mark.alone]
GIB = 2**30


def stop_line_in_reach(config: Path) -> None:
    """Raise the guard's stop line (settings.toml in `config`) to REACH below today's
    MemAvailable: 3 GiB, or a fifth of it when less is free (the box is never endangered).
    Other work on this shared box moves MemAvailable by a few GiB (a vLLM test starting or
    ending): the hog that crosses the line is sized when it is needed (crossing_hog), not
    now, so memory freed meanwhile does not keep it above the line."""
    memory = read_meminfo()
    reach = min(3 * GIB, memory.available // 5)
    stop_pct = 100 * (memory.available - reach) / memory.total
    warn_pct = stop_pct + 25 * reach / memory.total
    config.mkdir(parents=True, exist_ok=True)
    (config / "settings.toml").write_text(
        f"[guard]\nstop_available_pct = {stop_pct:.2f}\nwarn_available_pct = {warn_pct:.2f}\n"
    )


def crossing_hog() -> MemoryHog:
    """A hog that takes MemAvailable from what it is now to 1 GiB below the stop line."""
    memory = read_meminfo()
    line = load_settings().guard.stop_available_pct / 100 * memory.total
    size = int(memory.available - line + GIB) // 4096 * 4096
    assert 0 < size <= memory.available // 2, (
        f"MemAvailable moved too far since the line was set ({memory.available / GIB:.1f} "
        f"GiB free, the line at {line / GIB:.1f} GiB): other work on this box"
    )
    return MemoryHog(size)


class CrossingHogs:
    """Hogs that take MemAvailable to 1 GiB below the stop line and keep it below: another
    is added whenever other work on this shared box frees memory and MemAvailable comes back
    to within half a GiB of the line (seen in a parallel run: 60 s at 78.3 % after the hog,
    the line at 76.5 %, and no stop to wait for)."""

    def __init__(self) -> None:
        self.hogs: list[MemoryHog] = []

    def keep_below(self) -> None:
        memory = read_meminfo()
        line = load_settings().guard.stop_available_pct / 100 * memory.total
        if memory.available > line - GIB // 2:
            self.hogs.append(crossing_hog())
            self.hogs[-1].allocate()

    def __enter__(self) -> CrossingHogs:
        self.keep_below()
        return self

    def __exit__(self, *exc: object) -> None:
        for hog in self.hogs:
            hog.close()


class Followed:
    """A front end's view of the guard: the events as they came, read in order."""

    def __init__(self) -> None:
        self.events: list[GuardEvent] = []
        self._queue: queue.Queue[tuple[float, GuardEvent]] = queue.Queue()
        self.at = 0.0  # when the event `until` returned last came (time.monotonic())
        self.done = threading.Event()
        self.own_readings = 0  # what this process's own watchdog read, at the end

    def __call__(self, event: GuardEvent) -> None:
        self.events.append(event)
        self._queue.put((time.monotonic(), event))
        if isinstance(event, GuardStopped):  # as `sparkdeck guard` does: nothing left
            self.done.set()

    def until(
        self,
        wanted: type | tuple[type, ...],
        timeout: float,
        also: Callable[[Any], bool] = lambda event: True,
    ) -> GuardEvent:
        """The next event of type `wanted` for which `also(event)` holds."""
        deadline = time.monotonic() + timeout
        while (left := deadline - time.monotonic()) > 0:
            try:
                at, event = self._queue.get(timeout=left)
            except queue.Empty:
                break
            if isinstance(event, wanted) and also(event):
                self.at = at
                return event
        raise AssertionError(
            f"no {wanted} within {timeout} s; {len(self.events)} events, the last: "
            f"{self.events[-4:]} (a shared box: did other work free as much as the hog took?)"
        )


def through_the_service(
    isolated_dirs, llama_image, scope: str, monkeypatch: pytest.MonkeyPatch
) -> tuple[GuardSettings, LaunchFlow, Followed]:
    """svc-tiny's preset, this scope, the service on: the guard settings, a launch flow and
    a front end's view for a test that launches through the service and follows its guard."""
    tiny_preset(isolated_dirs, llama_image)
    monkeypatch.setenv("SPARKDECK_SCOPE", scope)
    monkeypatch.setenv("SPARKDECK_SERVICE", "auto")
    settings = load_settings().guard
    return settings, LaunchFlow(connect, flush=False, guard=settings), Followed()


def launch_then_guard(expect: type, docker_client, scope) -> Followed:
    """Launch `svc-tiny` through engine_control(), follow its guard through the same
    control, cross the stop line with a real hog; what the front end saw."""
    settings = load_settings().guard
    flow = LaunchFlow(connect, flush=False, guard=GuardSettings())  # (its start-up guard:
    control = engine_control(lambda: flow)  # the usual line, not the one within reach)
    seen = Followed()
    try:
        assert type(control) is expect
        engine = control.launch(flow.plan(load_catalog().get("svc-tiny")), lambda e: None)
        following = control.guard(
            engine, connect(), settings, seen, seen.done, lambda: settings.running_hz
        )
        thread = threading.Thread(target=following.run, name="front end guard", daemon=True)
        thread.start()
        try:
            who = seen.until((ServiceGuards, GuardedHere, TakenOver), timeout=30)
            decided = ServiceDecided if expect is ServiceControl else Decided
            seen.until(decided, timeout=30)  # the guard of this path decides, before the hog
            assert scope_containers(docker_client, scope), "stopped before the hog"
            with CrossingHogs() as hogs:
                deadline = time.monotonic() + 60
                while True:
                    try:
                        left = deadline - time.monotonic()
                        seen.until(StopTried, timeout=min(5, left), also=lambda e: e.attempt.done)
                        break
                    except AssertionError:
                        if time.monotonic() >= deadline:
                            raise
                        hogs.keep_below()
            thread.join(timeout=30)
            assert not thread.is_alive(), "the guard did not end after the engine's stop"
        finally:
            seen.done.set()
        seen.events.insert(0, who)  # (kept first: it was read before the rest)
        seen.own_readings = len(following.watchdog.window)
        return seen
    finally:
        control.close()


def stop_decisions(events: list[GuardEvent]) -> list[GuardEvent]:
    return [
        e
        for e in events
        if (isinstance(e, Decided) and e.decision.level == "stop")
        or (isinstance(e, ServiceDecided) and e.level == "stop")
    ]


def test_with_the_service_off_the_front_end_guards_through_local_control(
    isolated_dirs, scope, docker_client, llama_image, monkeypatch
):
    stop_line_in_reach(isolated_dirs["config"])
    tiny_preset(isolated_dirs, llama_image)
    monkeypatch.setenv("SPARKDECK_SCOPE", scope)
    monkeypatch.setenv("SPARKDECK_SERVICE", "off")

    seen = launch_then_guard(LocalControl, docker_client, scope)

    assert scope_containers(docker_client, scope) == []  # this process's guard stopped it
    assert isinstance(seen.events[0], GuardedHere), seen.events[:3]
    assert not any(isinstance(e, (ServiceDecided, ServiceGuards, TakenOver)) for e in seen.events)
    (stop, *_) = stop_decisions(seen.events)
    line = load_settings().guard.stop_available_pct
    assert isinstance(stop, Decided) and stop.decision.reading.available_pct < line
    assert any(isinstance(e, StopTried) and e.attempt.done for e in seen.events)
    assert seen.own_readings >= 2
    assert not (isolated_dirs["runtime"] / "service.sock").exists()  # no service got involved


def test_with_the_service_on_the_front_end_follows_its_guard_through_service_control(
    service_env, isolated_dirs, scope, docker_client, llama_image, monkeypatch
):
    stop_line_in_reach(isolated_dirs["config"])
    tiny_preset(isolated_dirs, llama_image)
    monkeypatch.setenv("SPARKDECK_SCOPE", scope)
    monkeypatch.setenv("SPARKDECK_SERVICE", "auto")  # none runs: engine_control starts it

    seen = launch_then_guard(ServiceControl, docker_client, scope)

    assert scope_containers(docker_client, scope) == []  # the service's guard stopped it
    pid = service_pid(service_env)
    who = seen.events[0]
    assert isinstance(who, ServiceGuards) and who.pid == pid and pid is not None, seen.events[:3]
    assert f"process {pid}" in who.text
    assert not any(isinstance(e, (Decided, GuardedHere, TakenOver)) for e in seen.events)
    (stop, *_) = stop_decisions(seen.events)
    line = load_settings().guard.stop_available_pct
    assert isinstance(stop, ServiceDecided), stop
    assert any(r.startswith("MemAvailable") and f"< {line:g} %" in r for r in stop.reasons), stop
    assert any(isinstance(e, StopTried) and e.attempt.done for e in seen.events)
    (stopped,) = [e for e in seen.events if isinstance(e, GuardStopped)]
    assert "MemAvailable" in stopped.reasons
    # one watchdog decided and stopped: this process's own never read the host
    assert seen.own_readings == 0
    assert os.path.exists(isolated_dirs["runtime"] / "service.sock")


@pytest.mark.anyio
async def test_the_guard_lines_toast_after_its_own_stop_names_why(
    isolated_dirs, scope, docker_client, llama_image, monkeypatch
):
    """The TUI's line, following the guard through LocalControl: its own watchdog's stop
    decision is shown before the stop attempt that carries it out, so the toast says why the
    engine was stopped (a decision re-posted behind its attempt lost the reasons)."""
    from sparkdeck.config.settings import load_settings as settings_now
    from sparkdeck.ui.app import SparkdeckApp
    from sparkdeck.ui.guard.watchdog_line import WatchdogLine
    from tests.support.pane_host import wait_until

    stop_line_in_reach(isolated_dirs["config"])
    tiny_preset(isolated_dirs, llama_image)
    monkeypatch.setenv("SPARKDECK_SCOPE", scope)
    monkeypatch.setenv("SPARKDECK_SERVICE", "off")
    flow = LaunchFlow(connect, flush=False, guard=GuardSettings())  # its own start-up guard
    with contextlib.closing(engine_control(lambda: flow)) as control:
        control.launch(flow.plan(load_catalog().get("svc-tiny")), lambda e: None)
    app = SparkdeckApp(
        load_catalog, connect, settings=settings_now(), flush=False, engine_poll_seconds=0.5
    )

    def toasts() -> list[str]:
        return [str(t.render()) for t in app.screen.query("Toast")]

    async def scenario() -> list[str]:
        async with app.run_test(size=(120, 40), notifications=True) as pilot:
            line = app.query_one(WatchdogLine)
            await wait_until(
                pilot,
                lambda: str(line.render()).startswith(("memory guard OK", "memory guard WARN")),
                timeout=30.0,
                what=lambda: f"the line's own decisions: {line.render()}",
            )
            with CrossingHogs() as hogs:
                for chunk in range(12):
                    try:
                        await wait_until(
                            pilot,
                            lambda: any(
                                "the memory guard stopped the engine" in t for t in toasts()
                            ),
                            timeout=5.0,
                            what=lambda: f"the stop's toast within 60 s: {toasts()}",
                        )
                        break
                    except AssertionError:
                        if chunk == 11:
                            raise
                        hogs.keep_below()
            return toasts()

    said = await scenario()
    assert scope_containers(docker_client, scope) == []
    (toast,) = [t for t in said if "the memory guard stopped the engine" in t]
    line = settings_now().guard.stop_available_pct
    assert "stopped the engine: MemAvailable" in toast and f"< {line:g} %" in toast, toast


def test_the_service_control_takes_over_while_the_service_is_stopped_and_hands_back(
    service_env, isolated_dirs, scope, docker_client, llama_image, monkeypatch
):
    """Who guards now, as the front end hears it through ServiceControl: the service; this
    process within HEARTBEAT_S (2 s) of the service's SIGSTOP, its own watchdog deciding
    meanwhile; the service again once it answers."""
    settings, flow, seen = through_the_service(isolated_dirs, llama_image, scope, monkeypatch)
    with contextlib.closing(engine_control(lambda: flow)) as control:
        assert type(control) is ServiceControl
        engine = control.launch(flow.plan(load_catalog().get("svc-tiny")), lambda e: None)
        following = control.guard(
            engine, connect(), settings, seen, seen.done, lambda: settings.running_hz
        )
        thread = threading.Thread(target=following.run, name="front end guard", daemon=True)
        thread.start()
        try:
            first = seen.until(ServiceGuards, timeout=30)
            seen.until(ServiceDecided, timeout=30)
            pid = service_pid(service_env)
            assert first.pid == pid and pid is not None
            with stopped(pid) as stopped_at:
                taken = seen.until(TakenOver, timeout=HEARTBEAT_S + 5)
                told = seen.at - stopped_at
                seen.until(Decided, timeout=10)  # this process's own watchdog guards
                assert len(following.watchdog.window) >= 1
            back = seen.until(ServiceGuards, timeout=20)
            seen.until(ServiceDecided, timeout=10)
        finally:
            seen.done.set()
            thread.join(timeout=10)
    assert isinstance(taken, TakenOver) and taken.liveness.state == NOT_ANSWERING
    assert taken.liveness.pid == pid and "stopped (SIGSTOP)" in taken.liveness.detail
    assert told <= HEARTBEAT_S, f"{told:.2f} s"
    assert isinstance(back, ServiceGuards) and back.pid == pid
    assert scope_containers(docker_client, scope)  # nobody stopped it: no line was crossed
    assert not thread.is_alive()
    print(f"ServiceControl.guard said the service stopped answering {told:.2f} s after SIGSTOP")


def test_a_windows_guard_rides_on_its_feed_once_live_and_still_takes_over_within_2_s(
    service_env, isolated_dirs, scope, docker_client, llama_image, monkeypatch
):
    """A window's guard relays from the window's service feed (ui.service_feed): a stream
    and a thread of its own woke the window several times a second for one decision. A feed
    not live yet (the window started before the service): the relay opens its own stream,
    and leaves it for the feed once the feed is live. On the feed, the service's SIGSTOP is
    still told within HEARTBEAT_S, this process's watchdog guards meanwhile, and the relay
    goes back to the service when it answers."""
    from sparkdeck.ui.service_feed import ServiceFeed
    from tests.support.service_env import client_for

    settings, flow, seen = through_the_service(isolated_dirs, llama_image, scope, monkeypatch)
    feed = ServiceFeed()  # not started: not live

    def subscribers() -> int:
        with client_for(service_env) as client:
            return int(client.status()["subscribers"])

    with contextlib.closing(engine_control(lambda: flow)) as control:
        engine = control.launch(flow.plan(load_catalog().get("svc-tiny")), lambda e: None)
        following = control.guard(
            engine, connect(), settings, seen, seen.done, lambda: settings.running_hz, stream=feed
        )
        thread = threading.Thread(target=following.run, name="front end guard", daemon=True)
        thread.start()
        try:
            seen.until(ServiceDecided, timeout=30)
            assert subscribers() == 1  # the relay's own stream
            feed.start()
            deadline = time.monotonic() + 10
            while not (feed.live and subscribers() == 1) and time.monotonic() < deadline:
                time.sleep(0.2)
            assert feed.live and subscribers() == 1  # the feed's stream alone now
            seen.until(ServiceDecided, timeout=5)
            decided = sum(isinstance(e, ServiceDecided) for e in seen.events)
            time.sleep(3.0)
            assert sum(isinstance(e, ServiceDecided) for e in seen.events) - decided >= 2
            pid = service_pid(service_env)
            assert pid is not None
            with stopped(pid) as stopped_at:
                taken = seen.until(TakenOver, timeout=HEARTBEAT_S + 5)
                told = seen.at - stopped_at
                seen.until(Decided, timeout=10)  # this process's own watchdog guards
            back = seen.until(ServiceGuards, timeout=20)
            seen.until(ServiceDecided, timeout=10)
            # killed: the feed's stream breaks, and the relay riding on it hears at once
            deadline = time.monotonic() + 10
            while not feed.live and time.monotonic() < deadline:
                time.sleep(0.2)
            seen.until(ServiceDecided, timeout=5)
            killed_at = time.monotonic()
            os.kill(pid, signal.SIGKILL)
            gone = seen.until(TakenOver, timeout=HEARTBEAT_S + 5)
            told_killed = seen.at - killed_at
            # and this front end starts the service again, which adopts and guards the engine
            again = seen.until(ServiceGuards, timeout=30)
            seen.until(ServiceDecided, timeout=10)
        finally:
            seen.done.set()
            feed.close()
            thread.join(timeout=10)
    assert isinstance(taken, TakenOver) and taken.liveness.state == NOT_ANSWERING
    assert told <= HEARTBEAT_S, f"{told:.2f} s"
    assert isinstance(back, ServiceGuards) and back.pid == pid
    assert isinstance(gone, TakenOver) and told_killed <= HEARTBEAT_S, f"{told_killed:.2f} s"
    assert isinstance(again, ServiceGuards) and again.pid != pid
    assert scope_containers(docker_client, scope)  # nobody stopped the engine
    assert not thread.is_alive()
    print(
        f"riding on the feed, the guard said the service stopped answering {told:.2f} s "
        f"after SIGSTOP, and was gone {told_killed:.2f} s after SIGKILL"
    )
