"""Which engine the endpoint's requests go to now, and the model names it answers to.

The answer is kept, not asked for again on each request's path: the guard follower (the
owner's view of sparkdeck's engine) bumps `changes` when its engine is guarded, ready or
gone; `sparkdeck attach`/`detach` rewrite attached.toml, whose stat moves; the upstream pool
counts the requests the engine did not answer. A request compares those three (an int, an
int and one stat: microseconds) with what its kept answer was found under, and looks again
only when one moved. The issue-30 measurement this replaces: an answer trusted for a second,
then found again with a health probe in a thread on the next request's path, which added
25-28 ms to a request's first token after any pause of a person typing.

What is not kept: "no engine" answers and an engine still starting (no request is served
then; they are asked again after FIND_EVERY_S, the engine's health asked by the endpoint
itself meanwhile, since the follower asks it only every 2 s). Finding is the one resolver's
work (sparkdeck.endpoints: sparkdeck's ready engine, else the one attached engine).
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from starlette.concurrency import run_in_threadpool

from sparkdeck.endpoint.upstream_http import UpstreamError, UpstreamPool
from sparkdeck.endpoints import AttachedRegistry, Endpoint, answers, managed_endpoint, resolve

if TYPE_CHECKING:
    from sparkdeck.service.guarding import GuardFollower

FIND_EVERY_S = 1.0  # how long "no engine" (or one still starting) is trusted
CATALOG_EVERY_S = 5.0


@dataclass(frozen=True)
class Upstream:
    """The engine requests go to now, and the model names it answers to."""

    url: str
    name: str
    models: tuple[dict[str, Any], ...]  # the engine's own /v1/models entries
    preset_id: str | None
    aliases: tuple[str, ...]  # other names of its model: its preset's id and `model`

    @property
    def model_ids(self) -> tuple[str, ...]:
        return tuple(str(m.get("id")) for m in self.models)


@dataclass(frozen=True)
class _Found:
    """An answer of the finder and what it was found under."""

    upstream: Upstream | None
    why: str
    basis: tuple[int, int, tuple[int, int] | None]  # follower, pool, attached.toml stat
    at: float
    kept: bool  # True: good until the basis moves; False: for FIND_EVERY_S only


class UpstreamFinder:
    """Which engine runs: found again only when the owner's state, the attached registry
    or the engine's answering changed (see the module's docstring)."""

    def __init__(
        self,
        follower: GuardFollower,
        pool: UpstreamPool,
        catalog: Callable[[], Any],
        attached: Path | None = None,
    ) -> None:
        self._follower = follower
        self._pool = pool
        self._catalog = catalog
        self._attached = attached or AttachedRegistry().path
        self._found: _Found | None = None
        self._models: dict[str, tuple[tuple[dict[str, Any], ...], tuple[str, ...]]] = {}
        self._presets: tuple[float, Any] = (0.0, None)

    async def presets(self) -> Any:
        at, catalog = self._presets
        if catalog is None or time.monotonic() - at > CATALOG_EVERY_S:
            catalog = await run_in_threadpool(self._catalog)
            self._presets = (time.monotonic(), catalog)
        return catalog

    def _basis(self) -> tuple[int, int, tuple[int, int] | None]:
        try:
            stat = os.stat(self._attached)
            attached: tuple[int, int] | None = (stat.st_mtime_ns, stat.st_size)
        except OSError:
            attached = None
        return self._follower.changes, self._pool.failures, attached

    async def find(self, fresh: bool = False) -> tuple[Upstream | None, str]:
        """The engine, or None and what the user should do (`fresh`: after a switch)."""
        found, basis = self._found, self._basis()
        if (
            not fresh
            and found is not None
            and found.basis == basis
            and (found.kept or time.monotonic() - found.at < FIND_EVERY_S)
        ):
            return found.upstream, found.why
        # the basis is read before the state it covers: a change made while this looks
        # moves it again, and the next request looks again
        engine, ready = self._follower.engine, self._follower.ready
        kept = engine is None or ready
        if engine is not None and not ready:
            # the follower asks every 2 s; its engine snapshot can predate the container's
            # start, so the endpoint asks the engine's own health check itself meanwhile
            ready = await run_in_threadpool(answers, engine.base_url + engine.health_path)
        endpoint: Endpoint | None
        instance: str | None
        if engine is not None and ready:
            endpoint, instance = managed_endpoint(engine), engine.container_id
            why = ""
        else:
            resolved = await run_in_threadpool(resolve, None)  # the attached engine, if one
            endpoint, instance = resolved.endpoint, resolved.instance
            why = (
                f"sparkdeck's engine {engine.preset_id or engine.name} is starting: retry "
                "when it is ready"
                if engine is not None
                else resolved.why_none
                or "no engine is running: launch one with "
                "`sparkdeck launch PRESET` (or attach one: `sparkdeck attach URL`)"
            )
        upstream = None
        if endpoint is not None:
            # an engine's models and its preset's names for them are asked once per engine
            # instance, not on every request's path
            key = f"{endpoint.url} {instance}"
            models, aliases = self._models.get(key) or ((), ())
            if not models:
                models = await self._ask_models(endpoint.url)
                if endpoint.preset_id is not None:
                    preset = (await self.presets()).presets.get(endpoint.preset_id)
                    aliases = (endpoint.preset_id, *((preset.model,) if preset else ()))
                if models:
                    self._models = {key: (models, aliases)}  # the current engine's only
            upstream = Upstream(endpoint.url, endpoint.name, models, endpoint.preset_id, aliases)
        # kept until the basis moves: an engine found (sparkdeck's ready one, or the
        # attached one that answered) whose model list was read
        self._found = _Found(
            upstream,
            why,
            basis,
            time.monotonic(),
            kept and upstream is not None and bool(upstream.models),
        )
        return upstream, why

    async def _ask_models(self, url: str) -> tuple[dict[str, Any], ...]:
        try:
            data = (await self._pool.get_json(url + "/v1/models")).get("data", [])
            return tuple(m for m in data if isinstance(m, dict) and "id" in m)
        except (UpstreamError, ValueError, AttributeError):
            return ()
