"""Which preset a request's switch goes to while the owner's guard still holds an engine
(sparkdeck/endpoint/switching.py, the gate's `_home`): the decision alone, in-process.

The CI of 2026-12-04 saw one of twenty alternating streams
(tests/integration/test_endpoint_queue.py) answered in its opened stream with "model 'sw-a'
is not running": it came while a switch took sw-a down, the endpoint no longer reached sw-a
but the guard still held it as ready (Docker had not reported it gone), and the gate took it
for an engine on its way up, so no switch was made for the request. The guard follower here
is the service's real one, not started (no Docker); its engine is set as Docker would have
reported it. The owner and the finder are stand-ins for what the gate reads of them.
"""

from __future__ import annotations

import time
from dataclasses import replace
from types import SimpleNamespace

import pytest

from sparkdeck.config.settings import EndpointSettings, GuardSettings
from sparkdeck.endpoint.switching import SwitchGate, _Switch
from sparkdeck.service.guarding import GuardFollower
from sparkdeck.service.hub import EventHub
from tests.support.snapshot_readings import READY, no_docker

pytestmark = pytest.mark.anyio


class Finder:  # stand-in: the presets the gate looks a model up in
    async def presets(self) -> SimpleNamespace:
        return SimpleNamespace(
            presets={p: SimpleNamespace(id=p, model=f"/models/{p}.gguf") for p in ("sw-a", "sw-b")}
        )


def gate_with(engine: str, ready: bool, switching_to: str | None) -> SwitchGate:
    follower = GuardFollower(EventHub(), GuardSettings(), no_docker, lambda engine: False)
    follower.engine = replace(
        READY, container_id=f"c-{engine}", name=f"sparkdeck-{engine}-1", preset_id=engine
    )
    follower.ready = ready
    owner = SimpleNamespace(follower=follower, in_flight=None)
    gate = SwitchGate(owner, EndpointSettings(switch_on_request=True), Finder())  # type: ignore[arg-type]
    if switching_to is not None:
        gate._switch = _Switch(switching_to, switching_to, time.monotonic())
    return gate


async def test_a_request_for_the_engine_a_switch_takes_down_waits_for_a_switch_back() -> None:
    gate = gate_with("sw-a", ready=True, switching_to="sw-b")
    assert await gate._home("sw-a", None) == "sw-a"


async def test_a_request_for_an_engine_on_its_way_up_waits_for_it_without_a_switch() -> None:
    gate = gate_with("sw-a", ready=False, switching_to=None)
    assert await gate._home("sw-a", None) is None


async def test_a_ready_engine_the_endpoint_missed_once_is_not_switched_to_again() -> None:
    """No switch runs: the engine is up and a probe of it failed. Switching to it would
    restart a running engine; the request goes on and is answered or refused."""
    gate = gate_with("sw-a", ready=True, switching_to=None)
    assert await gate._home("sw-a", None) is None
