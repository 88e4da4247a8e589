"""The stable OpenAI endpoint: one URL (127.0.0.1:8400) whatever engine runs behind it.

A second listener of the service process (server.py serves it beside the Unix-socket API,
in the same asyncio loop). `/v1/chat/completions`, `/v1/completions` and `/v1/embeddings`
go to the running engine: sparkdeck's once its guard follower has seen it answer its health
check, else the one attached engine (sparkdeck.endpoints.resolve, the one resolver). The
answer streams back as the engine sends it (status, headers less the hop-by-hop ones, error
bodies untouched); a client that goes away closes the upstream connection, which is how an
engine learns to abort the request. The request body is read whole first, within a bound
on all the bodies held at once (request_body.py): its `model` decides whether it may go
through, or makes the service switch engines first (switching.py). `/v1/models` lists every
preset's model and the running engine's own. Each request, and each refusal, becomes one
line of the request log (request_log.py, endpoint_refusals.py).
"""

from __future__ import annotations

import asyncio
import ipaddress
import os
import socket
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route
from starlette.types import ASGIApp, Receive, Scope, Send

from sparkdeck.endpoints import Endpoint, answers, managed_endpoint, resolve
from sparkdeck.service.endpoint_refusals import (
    KeyRequired,
    arrival,
    log_refusal,
    openai_error,
    routing_refusals,
    write_record,
)
from sparkdeck.service.guarding import GuardFollower
from sparkdeck.service.request_body import (
    Asked,
    BodyBudget,
    HeldBody,
    asked_of,
    read_body,
    with_model,
)
from sparkdeck.service.request_log import RequestLog, RequestRecord
from sparkdeck.service.stream_meter import Meter
from sparkdeck.service.upstream_http import UpstreamAnswer, UpstreamError, UpstreamPool
from sparkdeck.settings import EndpointSettings

if TYPE_CHECKING:
    from sparkdeck.service.owner import EngineOwner
    from sparkdeck.service.switching import SwitchGate

PORT_ENV = "SPARKDECK_ENDPOINT_PORT"  # overrides [endpoint] port (tests use a free port)
FORWARDED = ("/v1/chat/completions", "/v1/completions", "/v1/embeddings")
FIND_EVERY_S = 1.0  # how long a resolved engine is trusted before looking again
CATALOG_EVERY_S = 5.0
# hop-by-hop headers (RFC 9110 7.6.1) are the connection's own, never forwarded; host and
# content-length are the new connection's to set
_HOP = frozenset({b"connection", b"keep-alive", b"proxy-authenticate", b"proxy-authorization",
                  b"te", b"trailer", b"trailers", b"transfer-encoding", b"upgrade", b"host",
                  b"content-length"})


class EndpointRefused(Exception):
    """The endpoint's settings are unsafe (the LAN without a key, or no key where the owner
    asked for one on loopback too): the service refuses to start and says how to fix it."""


def listen_address(settings: EndpointSettings) -> tuple[str, int]:
    port = os.environ.get(PORT_ENV)
    return settings.host, int(port) if port else settings.port


def api_key(settings: EndpointSettings) -> str | None:
    return os.environ.get(settings.api_key_env) or None


def is_loopback(host: str) -> bool:
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return host == "localhost"


def check_exposure(settings: EndpointSettings) -> None:
    """Raise EndpointRefused for a LAN address without an API key, and for loopback without
    one when [endpoint] require_key_on_loopback asks for it (loopback is every local user's:
    without a key any of them may use the engine, and switch it with switch_on_request)."""
    host, _ = listen_address(settings)
    if api_key(settings) is not None:
        return
    if not is_loopback(host):
        raise EndpointRefused(
            f"[endpoint] host = {host!r} would open the OpenAI endpoint to the network "
            f"without an API key: set one in the environment variable "
            f"{settings.api_key_env} where the service starts, or use host = \"127.0.0.1\" "
            "(and `ssh -L` to reach it from another machine)")
    if settings.require_key_on_loopback:
        raise EndpointRefused(
            "[endpoint] require_key_on_loopback = true, but the environment variable "
            f"{settings.api_key_env} holds no API key: set one where the service starts "
            "(the unit's Environment= or the shell), or set require_key_on_loopback = false "
            "(every user of this machine can then use the endpoint)")


def open_listener(settings: EndpointSettings) -> socket.socket:
    """The endpoint's TCP socket (OSError when the port is taken)."""
    check_exposure(settings)
    host, port = listen_address(settings)
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.create_server((host, port), family=family, backlog=256)
    sock.set_inheritable(False)
    return sock


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


class Forwarder:
    """The ASGI app behind each forwarded path: check the model, forward, stream back.

    The request goes on as the caller sent it (upstream_http.py: nothing a client library
    would add, no cookie jar shared between callers)."""

    def __init__(self, finder: UpstreamFinder, pool: UpstreamPool, log: RequestLog,
                 key: str | None, gate: SwitchGate, budget: BodyBudget | None = None) -> None:
        self.finder, self._pool, self.log, self._key, self.gate = finder, pool, log, key, gate
        self.budget = budget or BodyBudget()  # the bodies held at once, across requests

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        arrived, record = time.monotonic(), arrival(scope)
        held = await read_body(scope, receive, self.budget)
        try:
            await self._forward(scope, receive, send, arrived, record, held)
        finally:
            held.release()

    async def _forward(self, scope: Scope, receive: Receive, send: Send, arrived: float,
                       record: dict[str, Any], held: HeldBody) -> None:
        asked = held.refusal or asked_of(held.body or b"")
        if not isinstance(asked, Asked):
            await self._refuse(scope, receive, send, record, asked)
            return
        record["model"], record["stream"] = asked.model, asked.stream
        upstream, why = await self.finder.find()
        # a switch that runs, or that this model asks for, is waited for first (switching.py)
        admitted = await self.gate.admit(record, upstream, receive, send)
        upstream, opened = admitted.upstream, admitted.opened  # opened: a 200 stream begun
        if admitted.refusal is not None:
            await self._refuse(scope, receive, send, record, admitted.refusal, opened)
            return
        if upstream is None:
            await self._refuse(scope, receive, send, record, openai_error(
                503, why, "service_unavailable", "no_engine", {"Retry-After": "5"}))
            return
        record["engine"] = upstream.name
        model = record["model"]
        # an engine whose model list could not be read is not second-guessed: it answers
        if model is not None and upstream.model_ids and model not in upstream.model_ids:
            if model in upstream.aliases:
                # the preset's name for the model the engine serves under another id
                # (llama-server: the file path): the request means the running model
                rewritten = with_model(held.body or b"", upstream.model_ids[0])
                if not isinstance(rewritten, bytes):
                    await self._refuse(scope, receive, send, record, rewritten, opened)
                    return
                held.body = rewritten
            else:
                await self._refuse(scope, receive, send, record,
                                   await self.gate.wrong_model(model, upstream), opened)
                return
        headers = [(k, v) for k, v in scope["headers"]
                   if k.lower() not in _HOP and not (self._key and k.lower() == b"authorization")]
        target = upstream.url + scope["path"] + (
            "?" + scope["query_string"].decode("latin-1") if scope["query_string"] else "")
        try:
            answer = await self._pool.send(scope["method"], target, headers, held.body or b"")
        except UpstreamError as exc:
            await self._refuse(scope, receive, send, record, openai_error(
                502, f"the engine {upstream.name} did not answer ({exc.kind}): "
                "see `sparkdeck status`", "upstream_error", "engine_unreachable"), opened)
            return
        held.release()  # sent: the answer may stream for minutes without it
        meter = Meter(arrived, record["stream"],
                      answer.content_encoding in (None, "identity"))
        await self._relay(answer, meter, receive, send, opened)
        write_record(self.log, RequestRecord(**record, status=answer.status_code,
                                             **meter.figures()))

    async def _relay(self, answer: UpstreamAnswer, meter: Meter, receive: Receive,
                     send: Send, opened: bool = False) -> None:
        headers = [(k, v) for k, v in answer.raw_headers if k.lower() not in _HOP
                   or k.lower() == b"content-length"]

        answered = asyncio.Event()  # the engine's answer was handed on to its end

        async def pump() -> None:
            if not await self.gate.begin_answer(send, answer, headers, opened):
                return  # an engine's error put into the stream a switch wait opened
            async for chunk in answer.aiter_raw():
                meter.feed(chunk)
                await send({"type": "http.response.body", "body": chunk, "more_body": True})
            answered.set()
            await send({"type": "http.response.body", "body": b"", "more_body": False})

        async def gone() -> None:
            while (await receive())["type"] != "http.disconnect":
                pass

        pumping = asyncio.ensure_future(pump())
        watching = asyncio.ensure_future(gone())
        try:
            await asyncio.wait((pumping, watching), return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in (pumping, watching):
                task.cancel()
            await asyncio.gather(pumping, watching, return_exceptions=True)
            broke = None if pumping.cancelled() else pumping.exception()
            # uvicorn reports a disconnect as soon as the closing send is made, even while
            # that send still waits to drain, and a client may hang up after a stream's
            # [DONE]: after the whole answer, no client left early
            meter.disconnected = (watching.done() and not watching.cancelled()
                                  and not (answered.is_set() or meter.stream_ended()))
            if broke is not None:
                meter.failed = "the answer broke off: " + (
                    broke.kind if isinstance(broke, UpstreamError) else type(broke).__name__)
            answer.close()  # mid-body: the connection closes and the engine aborts

    async def _refuse(self, scope: Scope, receive: Receive, send: Send,
                      record: dict[str, Any], response: Response, opened: bool = False) -> None:
        await (self.gate.error_in_stream(send, response) if opened
               else response(scope, receive, send))
        log_refusal(self.log, record, response)


def build_endpoint(follower: GuardFollower, settings: EndpointSettings,
                   log: RequestLog | None = None, catalog: Callable[[], Any] | None = None,
                   owner: EngineOwner | None = None
                   ) -> tuple[ASGIApp, Callable[[], Awaitable[None]]]:
    """The endpoint's ASGI app, and what closes its upstream pool (made lazily, in the loop
    that serves it). `owner` switches engines on request ([endpoint] switch_on_request)."""
    from sparkdeck.presets import load_catalog
    from sparkdeck.service.switching import SwitchGate, listed_models

    pool = UpstreamPool()  # its session is made with the first request, in the serving loop
    finder = UpstreamFinder(follower, pool, catalog or load_catalog)
    log = log or RequestLog()
    forward = Forwarder(finder, pool, log, api_key(settings), SwitchGate(owner, settings, finder))

    async def models(request: Request) -> Response:
        upstream, _ = await finder.find()
        return JSONResponse(listed_models(upstream, await finder.presets()))

    async def closed() -> None:
        await pool.close()

    routes = [Route("/v1/models", models), *(Route(p, forward, methods=["POST"])
                                             for p in FORWARDED)]
    app = Starlette(routes=routes, exception_handlers=routing_refusals(log))

    async def dispatch(scope: Scope, receive: Receive, send: Send) -> None:
        # a forwarded POST goes straight to the forwarder, not through Starlette's router
        # and middleware (each step of which is on every request's first token); the rest
        # (the model list, wrong methods, unknown paths) is Starlette's
        if scope["type"] == "http" and scope["method"] == "POST" and scope["path"] in FORWARDED:
            await forward(scope, receive, send)
        else:
            await app(scope, receive, send)

    return KeyRequired(dispatch, api_key(settings), log), closed


class EndpointListener:
    """The endpoint's own uvicorn server on its TCP socket, served beside the service's API
    in the same loop. It takes no signals: the API's server does, and stops this one."""

    def __init__(self, settings: EndpointSettings, follower: GuardFollower,
                 owner: EngineOwner | None = None) -> None:
        import uvicorn

        from sparkdeck.service.quiet_server import QuietServer

        self.sock = open_listener(settings)
        self.address = self.sock.getsockname()[:2]
        app, self._close = build_endpoint(follower, settings, owner=owner)
        self._server = QuietServer(uvicorn.Config(app, log_level="warning", lifespan="off",
                                                  access_log=False), takes_signals=False)
        self._task: asyncio.Task | None = None

    def start(self) -> None:
        self._task = asyncio.create_task(self._server.serve(sockets=[self.sock]),
                                         name="openai endpoint")

    async def stop(self) -> None:
        self._server.request_exit()
        if self._task is not None:
            await asyncio.gather(self._task, return_exceptions=True)
        await self._close()
        self.sock.close()
