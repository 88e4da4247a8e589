"""No probe on the request path (issue 30, item 4): the endpoint's finder keeps the engine it
found and asks nothing on a request's path after a pause, however long, until what it was
found under moves (the owner's state, attached.toml, the pool's failures).

In-process, against a real loopback OpenAI server attached the way `sparkdeck attach` does it
(a real registry file in the test's data dir) and the service's real guard follower, not
started: no sparkdeck engine runs, so the finder goes to the attached engine. The timing this
buys is measured by benchmarks/endpoint_load.py on the real llama-server (docs/performance.md);
here, what a broken finder does is counted: the old one found the engine again, with a
health probe in a thread, on the first request after FIND_EVERY_S.
"""

from __future__ import annotations

import asyncio

import pytest

from sparkdeck.catalog import load_catalog
from sparkdeck.config.settings import GuardSettings
from sparkdeck.endpoint import upstream
from sparkdeck.endpoint.upstream import FIND_EVERY_S, UpstreamFinder
from sparkdeck.endpoint.upstream_http import UpstreamPool
from sparkdeck.endpoints import AttachedRegistry, endpoint_for
from sparkdeck.service.guarding import GuardFollower
from sparkdeck.service.hub import EventHub
from tests.support.openai_loopback import LoopbackOpenAI


def no_docker():  # the follower is never started: nothing asks Docker
    raise AssertionError("the finder asked Docker")


@pytest.mark.anyio
async def test_after_a_pause_a_request_asks_nothing_until_something_moved(monkeypatch) -> None:
    asked: list[str] = []
    real_resolve = upstream.resolve
    monkeypatch.setattr(upstream, "resolve", lambda *a: asked.append("resolve") or real_resolve(*a))
    follower = GuardFollower(EventHub(), GuardSettings(), no_docker, lambda engine: False)

    async def scenario(server: LoopbackOpenAI) -> None:
        pool = UpstreamPool()
        finder = UpstreamFinder(follower, pool, load_catalog)
        try:
            first, why = await finder.find()
            assert first is not None and first.url == server.url, why
            assert first.model_ids == ("loopback-model",) and asked == ["resolve"]
            for pause in (FIND_EVERY_S + 0.2, 2.0):  # a person reading, then typing
                await asyncio.sleep(pause)
                again, _ = await finder.find()
                assert again is first and asked == ["resolve"], asked  # nothing asked
            # a change of the attached registry (a detach) moves attached.toml: found again
            assert AttachedRegistry().remove("lb")
            gone, why = await finder.find()
            assert gone is None and "attach" in why and asked == ["resolve", "resolve"]
        finally:
            await pool.close()

    with LoopbackOpenAI() as server:
        AttachedRegistry().add(endpoint_for(server.url, "openai", name="lb", source="attached"))
        await scenario(server)


@pytest.mark.anyio
async def test_a_fresh_find_after_a_switch_asks_again(monkeypatch) -> None:
    """The one caller that must not be answered from what was kept: the switch, which asks
    for the new engine with fresh=True."""
    asked: list[str] = []
    real_resolve = upstream.resolve
    monkeypatch.setattr(upstream, "resolve", lambda *a: asked.append("resolve") or real_resolve(*a))
    follower = GuardFollower(EventHub(), GuardSettings(), no_docker, lambda engine: False)

    async def scenario() -> None:
        pool = UpstreamPool()
        finder = UpstreamFinder(follower, pool, load_catalog)
        try:
            await finder.find()
            await finder.find(fresh=True)
            assert asked == ["resolve", "resolve"]
        finally:
            await pool.close()

    with LoopbackOpenAI() as server:
        AttachedRegistry().add(endpoint_for(server.url, "openai", name="lb", source="attached"))
        await scenario()
