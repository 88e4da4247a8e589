"""The service's local API: HTTP + JSON (Starlette), an event stream (server-sent events).

Versioned paths: everything lives under /v{API_VERSION}/, every answer carries the
X-Sparkdeck-Api header, and a front end that says it speaks another version (the same
header on its request) gets a 409 naming both versions and what to do, instead of answers it
would misread. Blocking work (Docker, /proc) runs in Starlette's thread pool so one slow call
never stalls the event streams.

  GET  /v2/heartbeat         the pid and what the watchdog guards, from memory (liveness.py)
  GET  /v2/status            the engine, the guard, what is in flight, the latest readings
  GET  /v1/plan?preset=ID    the launch plan (what is stopped, flush, fit with its numbers)
  POST /v2/launch            {"preset", "flush", "force", "timeout", "skip_switch_wait"}
  POST /v2/launch/cancel     cancel the launch in flight
  POST /v2/launch/skip-wait  end its wait for the stopped engine's memory now
  POST /v2/stop              stop sparkdeck's engine
  GET  /v2/events            the event stream (engine, launch, guard, telemetry, metrics,
                             docker); ?kinds=a,b: only those, the latest of each first
"""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import AsyncIterator
from typing import Any

from sse_starlette import EventSourceResponse, ServerSentEvent
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.datastructures import Headers, MutableHeaders
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from sparkdeck.config.file_lock import LockBusy
from sparkdeck.launch.lock_holder import Busy, UnknownPreset
from sparkdeck.launch.stop_countdown import DEFAULT_GRACE_S
from sparkdeck.service.hub import EventHub
from sparkdeck.service.liveness import heartbeat_body
from sparkdeck.service.location import API_VERSION
from sparkdeck.service.owner import EngineOwner

VERSION_HEADER = "X-Sparkdeck-Api"
# a keep-alive comment on the event stream every second: a front end that reads nothing for
# liveness.HEARTBEAT_S knows the service's loop is not answering (telemetry, also 1 Hz, comes
# from a thread of its own and may be late without the service being stuck)
PING_S = 1

_FLUSH = {"auto": None, "yes": True, "no": False}


MAX_GRACE_S = 600.0  # a stop's longest grace: beyond it a wedged engine holds memory on


def _error(status: int, message: str, **extra: Any) -> JSONResponse:
    return JSONResponse({"error": message, **extra}, status_code=status)


class Versioned:
    """ASGI middleware: every answer says the API version; a request that says it speaks
    another one is refused with what to do (streams included, so no BaseHTTPMiddleware)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        asked = Headers(scope=scope).get(VERSION_HEADER)
        if asked is not None and asked != str(API_VERSION):
            refusal = _error(
                409,
                f"this sparkdeck service speaks API v{API_VERSION}, the front end "
                f"v{asked}: they are different sparkdeck versions. Restart the service with "
                "the front end's version (`sparkdeck service stop`, then `sparkdeck service "
                "start`)",
                api_version=API_VERSION,
            )
            refusal.headers[VERSION_HEADER] = str(API_VERSION)
            await refusal(scope, receive, send)
            return

        async def stamped(message: Message) -> None:
            if message["type"] == "http.response.start":
                MutableHeaders(scope=message)[VERSION_HEADER] = str(API_VERSION)
            await send(message)

        await self.app(scope, receive, stamped)


def build_app(owner: EngineOwner, hub: EventHub) -> Starlette:
    async def heartbeat(request: Request) -> Response:
        return JSONResponse(heartbeat_body(os.getpid(), owner.follower, hub))

    async def status(request: Request) -> Response:
        body = await run_in_threadpool(owner.status)
        body.update(api_version=API_VERSION, pid=os.getpid(), subscribers=hub.subscribers)
        return JSONResponse(body)

    async def plan(request: Request) -> Response:
        preset = request.query_params.get("preset", "")
        flush = request.query_params.get("flush", "auto")
        if flush not in _FLUSH:
            return _error(400, f"flush must be one of {', '.join(_FLUSH)}, not {flush!r}")
        return JSONResponse(await run_in_threadpool(owner.plan, preset, _FLUSH[flush]))

    async def launch(request: Request) -> Response:
        try:
            body = await request.json()
            if not isinstance(body, dict) or not isinstance(body.get("preset"), str):
                raise ValueError("a JSON object with a string `preset`")
            flush = _FLUSH[body.get("flush", "auto")]
            timeout = body.get("timeout")
            options: dict[str, Any] = {
                "flush": flush,
                "force": bool(body.get("force", False)),
                "timeout": float(timeout) if timeout is not None else None,
                "skip_switch_wait": bool(body.get("skip_switch_wait", False)),
            }
        except (ValueError, KeyError, TypeError) as exc:
            return _error(400, f"bad launch request: {exc}")
        launch_id = await run_in_threadpool(lambda: owner.launch(body["preset"], **options))
        return JSONResponse({"launch": launch_id}, status_code=202)

    async def cancel(request: Request) -> Response:
        return JSONResponse({"cancelled": owner.cancel_launch()})

    async def skip_wait(request: Request) -> Response:
        return JSONResponse({"skipped": owner.skip_switch_wait()})

    async def stop(request: Request) -> Response:
        try:
            body = (await request.json()) if await request.body() else {}
            grace = float(body.get("grace", DEFAULT_GRACE_S)) if isinstance(body, dict) else -1
            if not 0 <= grace <= MAX_GRACE_S:
                raise ValueError(f"`grace` from 0 to {MAX_GRACE_S:g} seconds")
        except (ValueError, TypeError) as exc:
            return _error(400, f"bad stop request: {exc}")
        return JSONResponse({"stopped": await run_in_threadpool(owner.stop, grace)})

    async def events(request: Request) -> Response:
        # ?kinds=telemetry,docker: only those kinds, the latest of each first (a window that
        # renders the service's readings draws them at once and parses nothing else)
        wanted = frozenset(filter(None, request.query_params.get("kinds", "").split(",")))
        # &replay=a,b: replay only those kinds' latest (`replay=` none: a guard relay must not
        # take an earlier engine's "stopped by the guard" for news about this one)
        asked = request.query_params.get("replay")
        replay = wanted if asked is None else wanted & frozenset(filter(None, asked.split(",")))

        def sse(event: Any) -> ServerSentEvent:
            return ServerSentEvent(json.dumps(event.to_dict()), event=event.kind, id=str(event.id))

        async def stream() -> AsyncIterator[ServerSentEvent]:
            # the hello first: a client knows its stream is live before it acts
            yield ServerSentEvent(json.dumps({"api_version": API_VERSION}), event="hello")
            async for event in hub.subscribe(replay=sorted(replay), kinds=wanted or None):
                yield sse(event)

        async def quiet_stream() -> AsyncIterator[ServerSentEvent]:
            """The filtered stream's keep-alive comes only after PING_S without an event:
            with telemetry every second it never comes, and neither end wakes for it (each
            wake-up of an idle process costs about a millisecond: docs/performance.md)."""
            events = aiter(stream())
            following: asyncio.Future[ServerSentEvent] | None = None
            try:
                while True:
                    following = following or asyncio.ensure_future(anext(events))
                    done, _ = await asyncio.wait({following}, timeout=PING_S)
                    if not done:
                        yield ServerSentEvent(comment="ping")
                        continue
                    sent, following = following.result(), None
                    yield sent
            finally:
                if following is not None:
                    following.cancel()

        if wanted:
            return EventSourceResponse(quiet_stream(), ping=0)
        return EventSourceResponse(stream(), ping=PING_S)

    routes = [
        Route(f"/v{API_VERSION}/heartbeat", heartbeat),
        Route(f"/v{API_VERSION}/status", status),
        Route(f"/v{API_VERSION}/plan", plan),
        Route(f"/v{API_VERSION}/launch", launch, methods=["POST"]),
        Route(f"/v{API_VERSION}/launch/cancel", cancel, methods=["POST"]),
        Route(f"/v{API_VERSION}/launch/skip-wait", skip_wait, methods=["POST"]),
        Route(f"/v{API_VERSION}/stop", stop, methods=["POST"]),
        Route(f"/v{API_VERSION}/events", events),
    ]

    async def busy(request: Request, exc: Exception) -> Response:
        return _error(409, str(exc))

    async def unknown(request: Request, exc: Exception) -> Response:
        return _error(404, str(exc))

    async def not_found(request: Request, exc: Exception) -> Response:
        return _error(
            404,
            f"no such path {request.url.path}: this service speaks API "
            f"v{API_VERSION} (/v{API_VERSION}/...)",
        )

    async def failed(request: Request, exc: Exception) -> Response:
        return _error(500, str(exc) or type(exc).__name__, error_type=type(exc).__name__)

    app = Starlette(
        routes=routes,
        middleware=[Middleware(Versioned)],
        exception_handlers={
            Busy: busy,
            LockBusy: busy,
            UnknownPreset: unknown,
            404: not_found,
            Exception: failed,
        },
    )

    return app
