"""EngineControl: one interface, two owners, the same events (sparkdeck.service.control).

The same preset is launched twice on the real Docker daemon, once with the service switched
off (this process runs the launch sequence) and once through the real service, which
engine_control() starts itself. Both hand back the same kind of engine and the same typed
events in the same order, so a front end cannot tell them apart but by `by`; a stop through
either removes the engine.
"""

from __future__ import annotations

import os

import pytest

from sparkdeck.catalog import load_catalog
from sparkdeck.config.settings import GuardSettings
from sparkdeck.launch.events import (
    ContainerStarted,
    EngineReady,
    GuardDecided,
    LaunchEvent,
    SwitchWaited,
)
from sparkdeck.launch.plan import LaunchFlow
from sparkdeck.runtime import connect
from sparkdeck.service.control import LocalControl, ServiceControl, engine_control
from tests.conftest import scope_containers
from tests.support.service_env import service_env, tiny_preset  # noqa: F401 - a fixture

pytestmark = [pytest.mark.docker, pytest.mark.llama]


def launch_once(expect: type) -> tuple[list[LaunchEvent], str, list[str]]:
    flow = LaunchFlow(connect, flush=False, guard=GuardSettings())
    control = engine_control(lambda: flow)
    try:
        assert type(control) is expect
        plan = flow.plan(load_catalog().get("ctl-tiny"))
        events: list[LaunchEvent] = []
        engine = control.launch(plan, events.append, timeout=60)
        assert engine.preset_id == "ctl-tiny" and engine.alive
        stopped = control.stop(lambda event: None)
        return events, control.by, [e.name for e in stopped]
    finally:
        control.close()


def test_the_service_and_this_process_hand_back_the_same_events(
    service_env, isolated_dirs, scope, docker_client, llama_image, monkeypatch
):
    tiny_preset(isolated_dirs, llama_image, "ctl-tiny")
    monkeypatch.setenv("SPARKDECK_SCOPE", scope)

    monkeypatch.setenv("SPARKDECK_SERVICE", "off")
    local, local_by, local_stopped = launch_once(LocalControl)
    assert local_by == "" and len(local_stopped) == 1
    assert scope_containers(docker_client, scope) == []

    monkeypatch.setenv("SPARKDECK_SERVICE", "auto")  # none runs: engine_control starts it
    remote, remote_by, remote_stopped = launch_once(ServiceControl)
    assert remote_by == "the service" and len(remote_stopped) == 1
    assert scope_containers(docker_client, scope) == []
    assert os.path.exists(isolated_dirs["runtime"] / "service.sock")

    # the same steps, each a typed event (not a line of text), in the same order; the
    # second launch also waits for the memory the first one's stop left returning, and the
    # start-up guard speaks when this (busy) machine's memory readings move: those two
    # depend on the machine, not on who runs the launch
    waits = [e for e in remote if isinstance(e, SwitchWaited)]
    assert all(w.engine == "ctl-tiny" for w in waits), waits

    def steps(events: list[LaunchEvent]) -> list[type]:
        return [type(e) for e in events if not isinstance(e, (SwitchWaited, GuardDecided))]

    assert steps(remote) == steps(local), (remote, local)
    started = next(e for e in remote if isinstance(e, ContainerStarted))
    ready = next(e for e in remote if isinstance(e, EngineReady))
    assert started.engine.preset_id == ready.engine.preset_id == "ctl-tiny"
    assert started.engine.container_id == ready.engine.container_id
