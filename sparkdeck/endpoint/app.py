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
import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route
from starlette.types import ASGIApp, Receive, Scope, Send

from sparkdeck.catalog import load_catalog
from sparkdeck.config.settings import EndpointSettings
from sparkdeck.endpoint.answers import (
    begin_answer,
    error_in_stream,
    left_early,
    listed_models,
    wrong_model,
)
from sparkdeck.endpoint.listener import api_key
from sparkdeck.endpoint.refusals import (
    KeyRequired,
    arrival,
    log_refusal,
    openai_error,
    routing_refusals,
    write_record,
)
from sparkdeck.endpoint.request_body import (
    Asked,
    BodyBudget,
    HeldBody,
    asked_of,
    read_body,
    with_model,
)
from sparkdeck.endpoint.request_log import RequestLog, RequestRecord
from sparkdeck.endpoint.stream_meter import Meter
from sparkdeck.endpoint.switching import SwitchGate
from sparkdeck.endpoint.upstream import UpstreamFinder
from sparkdeck.endpoint.upstream_http import UpstreamAnswer, UpstreamError, UpstreamPool

if TYPE_CHECKING:
    from sparkdeck.service.guarding import GuardFollower
    from sparkdeck.service.owner import EngineOwner

FORWARDED = ("/v1/chat/completions", "/v1/completions", "/v1/embeddings")
# hop-by-hop headers (RFC 9110 7.6.1) are the connection's own, never forwarded; host and
# content-length are the new connection's to set
_HOP = frozenset(
    {
        b"connection",
        b"keep-alive",
        b"proxy-authenticate",
        b"proxy-authorization",
        b"te",
        b"trailer",
        b"trailers",
        b"transfer-encoding",
        b"upgrade",
        b"host",
        b"content-length",
    }
)


class CallerWatch:
    """The caller's connection, watched from the moment its request goes to the engine until
    the answer has been relayed. A caller that hangs up before the engine began to answer
    (a long prefill, an engine that hangs) ends the request's wait there; one that hangs up
    during the answer ends the relay. Either way the engine's connection closes, which is
    how an engine learns to drop the request. Before, only the relay watched: a caller gone
    during the wait left its request waiting on the engine for as long as the engine took,
    one engine connection held each, and a service with such requests open could not stop.
    """

    def __init__(self, receive: Receive) -> None:
        self._request = asyncio.current_task()
        self.answer: UpstreamAnswer | None = None
        self.left = False
        self._task = asyncio.ensure_future(self._watch(receive))

    async def _watch(self, receive: Receive) -> None:
        while (await receive())["type"] != "http.disconnect":
            pass
        self.left = True
        if self.answer is not None:
            self.answer.close()  # the relay's next read ends
        elif self._request is not None:
            self._request.cancel()  # the request's wait for the engine's answer ends

    async def end(self) -> bool:
        """Stop watching; whether the caller had hung up by then."""
        self._task.cancel()
        await asyncio.gather(self._task, return_exceptions=True)
        return self.left


class Forwarder:
    """The ASGI app behind each forwarded path: check the model, forward, stream back.

    The request goes on as the caller sent it (upstream_http.py: nothing a client library
    would add, no cookie jar shared between callers)."""

    def __init__(
        self,
        finder: UpstreamFinder,
        pool: UpstreamPool,
        log: RequestLog,
        key: str | None,
        gate: SwitchGate,
        budget: BodyBudget | None = None,
    ) -> None:
        self.finder, self._pool, self.log, self._key, self.gate = finder, pool, log, key, gate
        self.budget = budget or BodyBudget()  # the bodies held at once, across requests

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        arrived, record = time.monotonic(), arrival(scope)
        held = await read_body(scope, receive, self.budget)
        try:
            await self._forward(scope, receive, send, arrived, record, held)
        finally:
            held.release()
            self.gate.finished(record)  # out of flight: a switch may be the queue's turn

    async def _forward(
        self,
        scope: Scope,
        receive: Receive,
        send: Send,
        arrived: float,
        record: dict[str, Any],
        held: HeldBody,
    ) -> None:
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
            await self._refuse(
                scope,
                receive,
                send,
                record,
                openai_error(503, why, "service_unavailable", "no_engine", {"Retry-After": "5"}),
            )
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
                await self._refuse(
                    scope,
                    receive,
                    send,
                    record,
                    wrong_model(model, upstream, await self.finder.presets()),
                    opened,
                )
                return
        headers = [
            (k, v)
            for k, v in scope["headers"]
            if k.lower() not in _HOP and not (self._key and k.lower() == b"authorization")
        ]
        target = (
            upstream.url
            + scope["path"]
            + ("?" + scope["query_string"].decode("latin-1") if scope["query_string"] else "")
        )
        watch = CallerWatch(receive)
        try:
            answer = await self._pool.send(scope["method"], target, headers, held.body or b"")
        except UpstreamError as exc:
            await watch.end()
            await self._refuse(
                scope,
                receive,
                send,
                record,
                openai_error(
                    502,
                    f"the engine {upstream.name} did not answer ({exc.kind}): "
                    "see `sparkdeck status`",
                    "upstream_error",
                    "engine_unreachable",
                ),
                opened,
            )
            return
        except asyncio.CancelledError:
            if not watch.left:  # not the caller's doing: the service stops
                await watch.end()
                raise
            # the caller hung up before the engine began its answer: the wait ends here,
            # and the engine's connection closed with it (upstream_http's _exchange)
            asyncio.current_task().uncancel()  # type: ignore[union-attr]  # in a task
            await watch.end()
            await self._refuse(scope, receive, send, record, left_early(upstream.name), opened)
            return
        watch.answer = answer
        held.release()  # sent: the answer may stream for minutes without it
        meter = Meter(arrived, record["stream"], answer.content_encoding in (None, "identity"))
        await self._relay(answer, meter, watch, send, opened)
        write_record(
            self.log, RequestRecord(**record, status=answer.status_code, **meter.figures())
        )

    async def _relay(
        self,
        answer: UpstreamAnswer,
        meter: Meter,
        watch: CallerWatch,
        send: Send,
        opened: bool = False,
    ) -> None:
        headers = [
            (k, v)
            for k, v in answer.raw_headers
            if k.lower() not in _HOP or k.lower() == b"content-length"
        ]
        # the answer is relayed in this task, the caller watched in the one beside it: a
        # task less on each request's first token than relaying in a task of its own
        answered, broke = False, None
        try:
            if await begin_answer(send, answer, headers, opened):
                async for chunk in answer.aiter_raw():
                    meter.feed(chunk)
                    await send({"type": "http.response.body", "body": chunk, "more_body": True})
                await send({"type": "http.response.body", "body": b"", "more_body": False})
            answered = True  # the engine's answer was handed on to its end
        except Exception as exc:  # noqa: BLE001 - the answer broke off: logged as its error
            broke = exc
        finally:
            left = await watch.end()
            answer.close()  # mid-body: the connection closes and the engine aborts
        # uvicorn reports a disconnect as soon as the closing send is made, even while that
        # send still waits to drain, and a client may hang up after a stream's [DONE]: after
        # the whole answer, no client left early
        meter.disconnected = left and not (answered or meter.stream_ended())
        if broke is not None:
            meter.failed = "the answer broke off: " + (
                broke.kind if isinstance(broke, UpstreamError) else type(broke).__name__
            )

    async def _refuse(
        self,
        scope: Scope,
        receive: Receive,
        send: Send,
        record: dict[str, Any],
        response: Response,
        opened: bool = False,
    ) -> None:
        await (error_in_stream(send, response) if opened else response(scope, receive, send))
        log_refusal(self.log, record, response)


def build_endpoint(
    follower: GuardFollower,
    settings: EndpointSettings,
    log: RequestLog | None = None,
    catalog: Callable[[], Any] | None = None,
    owner: EngineOwner | None = None,
) -> tuple[ASGIApp, Callable[[], Awaitable[None]]]:
    """The endpoint's ASGI app, and what closes its upstream pool (made lazily, in the loop
    that serves it). `owner` switches engines on request ([endpoint] switch_on_request)."""

    pool = UpstreamPool()  # its session is made with the first request, in the serving loop
    finder = UpstreamFinder(follower, pool, catalog or load_catalog)
    log = log or RequestLog()
    gate = SwitchGate(owner, settings, finder)
    forward = Forwarder(finder, pool, log, api_key(settings), gate)
    if owner is not None:  # a launch a front end asks for lets the replies in flight finish
        owner.before_stop = gate.await_replies

    async def models(request: Request) -> Response:
        upstream, _ = await finder.find()
        return JSONResponse(listed_models(upstream, await finder.presets()))

    async def closed() -> None:
        await pool.close()

    routes = [
        Route("/v1/models", models),
        *(Route(p, forward, methods=["POST"]) for p in FORWARDED),
    ]
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
