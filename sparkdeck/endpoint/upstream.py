"""Which engine the endpoint's requests go to now, and the model names it answers to.

The guard follower already knows sparkdeck's engine and whether it is ready, so a request
never waits on Docker; with no sparkdeck engine, the one attached engine is asked for
(sparkdeck.endpoints.resolve, the one resolver).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from starlette.concurrency import run_in_threadpool

from sparkdeck.endpoint.upstream_http import UpstreamError, UpstreamPool
from sparkdeck.endpoints import Endpoint, answers, managed_endpoint, resolve

if TYPE_CHECKING:
    from sparkdeck.service.guarding import GuardFollower

FIND_EVERY_S = 1.0  # how long a resolved engine is trusted before looking again
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


class UpstreamFinder:
    """Which engine runs, asked at most once a FIND_EVERY_S (a request never waits on
    Docker: the guard follower already knows sparkdeck's engine and whether it is ready)."""

    def __init__(self, follower: GuardFollower, pool: UpstreamPool,
                 catalog: Callable[[], Any]) -> None:
        self._follower = follower
        self._pool = pool
        self._catalog = catalog
        self._found: tuple[float, Upstream | None, str] = (0.0, None, "")
        self._models: dict[str, tuple[tuple[dict[str, Any], ...], tuple[str, ...]]] = {}
        self._presets: tuple[float, Any] = (0.0, None)

    async def presets(self) -> Any:
        at, catalog = self._presets
        if catalog is None or time.monotonic() - at > CATALOG_EVERY_S:
            catalog = await run_in_threadpool(self._catalog)
            self._presets = (time.monotonic(), catalog)
        return catalog

    async def find(self, fresh: bool = False) -> tuple[Upstream | None, str]:
        """The engine, or None and what the user should do (`fresh`: after a switch)."""
        at, upstream, why = self._found
        if not fresh and time.monotonic() - at < FIND_EVERY_S:
            return upstream, why
        engine, ready = self._follower.engine, self._follower.ready
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
            why = (f"sparkdeck's engine {engine.preset_id or engine.name} is starting: retry "
                   "when it is ready" if engine is not None
                   else resolved.why_none or "no engine is running: launch one with "
                "`sparkdeck launch PRESET` (or attach one: `sparkdeck attach URL`)")
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
            upstream = Upstream(endpoint.url, endpoint.name, models, endpoint.preset_id,
                                aliases)
        self._found = (time.monotonic(), upstream, why)
        return upstream, why

    async def _ask_models(self, url: str) -> tuple[dict[str, Any], ...]:
        try:
            data = (await self._pool.get_json(url + "/v1/models")).get("data", [])
            return tuple(m for m in data if isinstance(m, dict) and "id" in m)
        except (UpstreamError, ValueError, AttributeError):
            return ()

