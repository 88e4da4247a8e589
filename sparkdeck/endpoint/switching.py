"""Switch on request: a request naming another preset's model, and the queue behind a switch.

With `[endpoint] switch_on_request = true` a request for a preset's model that does not run
makes the service do the switch the TUI does (EngineOwner.plan: what is stopped, the fit
check with its numbers; EngineOwner.launch: stop, wait for the memory to come back, flush,
start, ready), while that request waits. One switch at a time: it is one asyncio task that
every waiting request awaits, so the requests that arrive meanwhile (for any model) wait
behind it, up to `[endpoint] queue` of them, and then go to the new engine or get the same
error as the request that asked for the switch. Over the bound: 503 with Retry-After. A
launch that a front end asked the service for (a window's switch, `sparkdeck launch`) is
queued behind the same way: requests that arrive while it runs wait for its engine instead of
finding none.

A waiting stream is answered at once (200, text/event-stream) once the fit check has passed,
and gets an SSE comment (`: loading <model>`) every `[endpoint] keepalive_s` (3 s) so
clients and proxies with an idle timeout do not give up on it; with `[endpoint]
loading_notice = true` also a visible chunk whose `reasoning_content` says "loading
<model>…". Its status is then spent: a failure after that
point is an SSE `data: {"error": ...}` event, which OpenAI clients raise as an API error.
Refusals before any byte went out keep their own status: 409 for a switch that does not fit
or that a launch already in progress keeps out (both clear once the user acts; 409 and not
507, which clients read as a fault of the server), 503 for a failed launch. All carry
`x-should-retry: false` (the `openai` client retries 409 and 5xx otherwise).
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from starlette.concurrency import run_in_threadpool
from starlette.responses import JSONResponse, Response
from starlette.types import Receive, Send

from sparkdeck.config.settings import EndpointSettings
from sparkdeck.endpoint.refusals import openai_error

if TYPE_CHECKING:
    from sparkdeck.endpoint.upstream import Upstream, UpstreamFinder
    from sparkdeck.endpoint.upstream_http import UpstreamAnswer
    from sparkdeck.service.owner import EngineOwner

FIND_AFTER_S = 20.0  # longest wait for the endpoint to see the engine a launch made ready
NO_RETRY = {"x-should-retry": "false"}


@dataclass(frozen=True)
class Admission:
    """Where a request goes after the switch it waited for (or why it does not)."""

    upstream: Upstream | None
    refusal: JSONResponse | None
    opened: bool  # a 200 event stream was begun while waiting: errors go in-stream
    waited_s: float


@dataclass
class _Switch:
    preset_id: str
    model: str
    started: float
    planned: asyncio.Event  # set once the fit check passed (a stream may open then)
    task: asyncio.Task | None = None  # -> (Upstream | None, JSONResponse | None)


class SwitchGate:
    """Decides whether a request waits for a switch, runs the switch, bounds the queue."""

    def __init__(self, owner: EngineOwner | None, settings: EndpointSettings,
                 finder: UpstreamFinder) -> None:
        self._owner, self._settings, self._finder = owner, settings, finder
        self._switch: _Switch | None = None
        self._waiting = 0  # requests queued behind the switch (not the one that asked)
        self.last_switch_s: float | None = None

    async def admit(self, record: dict[str, Any], upstream: Upstream | None,
                    receive: Receive, send: Send) -> Admission:
        """Where the request goes: `upstream` as found when no switch concerns it, else
        after waiting for the switch that runs or the one its model starts (the wait is
        written into its request-log `record`)."""
        model, path, stream = record["model"], record["path"], record["stream"]
        switch = self._switch
        if switch is None:
            preset = await self._target(model, upstream)
            if preset is None:
                if self._switch is None and self._owner is not None and (
                        self._owner.in_flight is not None):
                    self._switch = self._behind(*self._owner.in_flight)
                if self._switch is None:
                    return Admission(upstream, None, False, 0.0)
                return await self._queued(self._switch, record, path, stream, receive, send)
            if self._switch is None:  # no other request started one while the catalog read
                self._switch = switch = _Switch(preset.id, model or preset.id,
                                                time.monotonic(), asyncio.Event())
                switch.task = asyncio.ensure_future(self._run(switch))
            else:
                switch = self._switch
            return await self._wait(switch, record, path, stream, receive, send)
        return await self._queued(switch, record, path, stream, receive, send)

    async def _queued(self, switch: _Switch, record: dict[str, Any], path: str, stream: bool,
                      receive: Receive, send: Send) -> Admission:
        """Wait behind a running switch, one of at most `[endpoint] queue`."""
        if self._waiting >= self._settings.queue:
            left = max(1, round((self.last_switch_s or 10.0)
                                - (time.monotonic() - switch.started)))
            return Admission(None, openai_error(
                503, f"the endpoint is switching to {switch.model!r} and {self._waiting} "
                "requests already wait for it ([endpoint] queue): retry shortly",
                "service_unavailable", "switch_queue_full", {"Retry-After": str(left)}),
                False, 0.0)
        self._waiting += 1
        try:
            return await self._wait(switch, record, path, stream, receive, send)
        finally:
            self._waiting -= 1

    def _behind(self, launch_id: int, preset_id: str) -> _Switch:
        """A switch that follows the service's launch in flight (a front end asked for it):
        the requests wait for its engine. Its plan was confirmed already: a stream may open."""
        switch = _Switch(preset_id, preset_id, time.monotonic(), asyncio.Event())
        switch.planned.set()
        switch.task = asyncio.ensure_future(self._run(switch, launch_id))
        return switch

    async def _target(self, model: str | None, upstream: Upstream | None) -> Any:
        """The preset a request's model names, when switching is on and it does not run."""
        if not self._settings.switch_on_request or self._owner is None or model is None:
            return None
        if upstream is not None and (model in upstream.model_ids or model in upstream.aliases):
            return None
        starting = self._owner.follower.engine  # one on its way up is waited for, not re-run
        if starting is not None and model in (starting.preset_id, starting.name):
            return None
        catalog = await self._finder.presets()
        named = [p for p in sorted(catalog.presets.values(), key=lambda p: p.id)
                 if model in (p.id, p.model)]
        return named[0] if named else None

    async def _wait(self, switch: _Switch, record: dict[str, Any], path: str, stream: bool,
                    receive: Receive, send: Send) -> Admission:
        began, opened = time.monotonic(), False
        assert switch.task is not None
        # a client that gives up while it waits leaves the queue at once (its place is not
        # held until the switch ends); the switch itself goes on for the others
        gone = asyncio.ensure_future(_disconnect(receive))
        planned = asyncio.ensure_future(switch.planned.wait())
        try:
            await asyncio.wait((switch.task, gone, *((planned,) if stream else ())),
                               return_when=asyncio.FIRST_COMPLETED)
            while stream and not switch.task.done() and not gone.done():
                if not opened:
                    opened = True
                    await send({"type": "http.response.start", "status": 200, "headers": [
                        (b"content-type", b"text/event-stream"), (b"cache-control", b"no-cache")]})
                    if self._settings.loading_notice and path.endswith("/chat/completions"):
                        await send(_body(_notice(switch.model)))
                await send(_body(f": loading {switch.model}\n\n".encode()))
                await asyncio.wait((switch.task, gone), timeout=self._settings.keepalive_s)
        finally:
            gone.cancel()
            planned.cancel()
        record["waited_s"] = waited = round(time.monotonic() - began, 3)
        if not switch.task.done():  # gone: 499 (nginx's "client closed request"), logged only
            return Admission(None, openai_error(
                499, f"the client disconnected while waiting for the switch to {switch.model!r}",
                "client_closed", "client_disconnected"), opened, waited)
        upstream, refusal = switch.task.result()
        return Admission(upstream, refusal, opened, waited)

    async def _run(self, switch: _Switch, launch_id: int | None = None
                   ) -> tuple[Upstream | None, JSONResponse | None]:
        try:
            if launch_id is not None:
                return await self._follow(switch, launch_id)
            return await self._switch_to(switch)
        except Exception as exc:  # noqa: BLE001 - every waiting request gets the reason
            return None, openai_error(503, f"switching to {switch.preset_id} failed: {exc}",
                                      "server_error", "switch_failed", NO_RETRY)
        finally:
            self._switch = None
            self.last_switch_s = time.monotonic() - switch.started

    async def _switch_to(self, switch: _Switch) -> tuple[Upstream | None, JSONResponse | None]:
        from sparkdeck.launch.lock_holder import Busy, UnknownPreset

        owner, preset_id = self._owner, switch.preset_id
        assert owner is not None
        flush = None if self._settings.switch_flush else False
        plan = await run_in_threadpool(owner.plan, preset_id, flush)
        if plan["fit"] is not None and not plan["fit"]["allowed"]:
            return None, openai_error(
                409, f"{preset_id} does not fit in memory, so the endpoint did not switch to "
                "it (the running engine keeps running):\n" + "\n".join(plan["fit_lines"]),
                "invalid_request_error", "model_does_not_fit", NO_RETRY)
        switch.planned.set()

        async def start() -> int | None:
            return await run_in_threadpool(owner.launch, preset_id, flush=flush)

        try:
            result = await self._result_of(start)
        except (Busy, UnknownPreset) as exc:
            return None, openai_error(409, f"cannot switch to {preset_id}: {exc}",
                                      "invalid_request_error", "switch_refused", NO_RETRY)
        return await self._engine_after(preset_id, result)

    async def _follow(self, switch: _Switch, launch_id: int
                      ) -> tuple[Upstream | None, JSONResponse | None]:
        """The engine of a launch a front end asked the service for, once it is ready."""
        owner = self._owner
        assert owner is not None

        async def running() -> int | None:  # None: it ended before the subscription
            flight = owner.in_flight
            return launch_id if flight is not None and flight[0] == launch_id else None

        return await self._engine_after(switch.preset_id, await self._result_of(running))

    async def _result_of(self, launched: Callable[[], Awaitable[int | None]]
                         ) -> dict[str, Any] | None:
        """The launch-result of the launch `launched` names (None: it had ended already).
        The subscription is in place first, so a result published after it is not missed."""
        owner = self._owner
        assert owner is not None
        events = owner.hub.subscribe()
        first = asyncio.ensure_future(events.__anext__())
        await asyncio.sleep(0)  # the subscription is in place before the launch can finish
        try:
            launch_id = await launched()
            if launch_id is None:
                return None
            event = await first
            while not (event.kind == "launch-result" and event.data.get("launch") == launch_id):
                event = await events.__anext__()
            return event.data
        finally:
            first.cancel()  # (done already, unless the launch was refused or had ended)
            await asyncio.gather(first, return_exceptions=True)  # the generator is let go
            await events.aclose()

    async def _engine_after(self, preset_id: str, result: dict[str, Any] | None
                            ) -> tuple[Upstream | None, JSONResponse | None]:
        """After the launch: its failure for every waiting request, or the new engine."""
        if result is not None and not result.get("ok"):
            tail = "\n".join((result.get("log_tail") or [])[-5:])
            return None, openai_error(
                503, f"switching to {preset_id} failed: {result.get('error')}"
                + (f"\nthe engine's last log lines:\n{tail}" if tail else ""),
                "server_error", "switch_failed", NO_RETRY)
        deadline = time.monotonic() + FIND_AFTER_S
        while True:  # the finder trusts what it saw for a second: asked afresh
            upstream, why = await self._finder.find(fresh=True)
            if upstream is not None and upstream.preset_id == preset_id:
                return upstream, None
            if time.monotonic() > deadline:
                return None, openai_error(503, f"{preset_id} started but the endpoint does "
                                          f"not reach it: {why}", "server_error",
                                          "switch_failed", NO_RETRY)
            await asyncio.sleep(0.1)

    async def error_in_stream(self, send: Send, error: Response | bytes) -> None:
        """An error after a waiting stream was opened with 200: an SSE `data:` event
        carrying the OpenAI-style error body (the `openai` client raises it), then the end."""
        body = bytes(error.body) if isinstance(error, Response) else error
        try:
            json.loads(body)
        except ValueError:  # an engine's error that is not JSON: wrapped, never sent raw
            body = json.dumps({"error": {"message": body.decode("utf-8", "replace")[:2000],
                                         "type": "server_error", "code": "engine_error"}}).encode()
        await send(_body(b"data: " + body + b"\n\n"))
        await send({"type": "http.response.body", "body": b"", "more_body": False})

    async def begin_answer(self, send: Send, answer: UpstreamAnswer,
                           headers: list[tuple[bytes, bytes]], opened: bool) -> bool:
        """Start relaying the engine's answer: its status and headers, or nothing when a
        switch wait already opened the stream; an engine's error in such a stream becomes
        an error event. False: the answer is complete."""
        if not opened:
            await send({"type": "http.response.start", "status": answer.status_code,
                        "headers": headers})
        elif answer.status_code != 200:
            await self.error_in_stream(send, await answer.aread())
            return False
        return True

    async def wrong_model(self, model: str, upstream: Upstream) -> JSONResponse:
        """The refusal of a model that does not run (switching off, or not a preset's)."""
        catalog = await self._finder.presets()
        named = [p.id for p in catalog.presets.values() if model in (p.id, p.model)]
        running = upstream.model_ids[0] if upstream.model_ids else upstream.name
        switch = f"`sparkdeck launch {named[0]}`" if named else "`sparkdeck launch PRESET`"
        return openai_error(
            404, f"model {model!r} is not running: this endpoint serves {running!r}"
            f"{f' (preset {upstream.preset_id})' if upstream.preset_id else ''}. Ask for "
            f"that model, or switch with {switch} (the switch takes the engine down first)",
            "invalid_request_error", "model_not_found")


async def _disconnect(receive: Receive) -> None:
    while (await receive())["type"] != "http.disconnect":
        pass


def _body(data: bytes) -> dict[str, Any]:
    return {"type": "http.response.body", "body": data, "more_body": True}


def _notice(model: str) -> bytes:
    chunk = {"id": "sparkdeck-switch", "object": "chat.completion.chunk",
             "created": int(time.time()), "model": model,
             "choices": [{"index": 0, "delta": {"reasoning_content": f"loading {model}…"},
                          "finish_reason": None}]}
    return b"data: " + json.dumps(chunk, ensure_ascii=False).encode() + b"\n\n"


def listed_models(upstream: Upstream | None, catalog: Any) -> dict[str, Any]:
    """/v1/models: the running engine's own models, then every preset's model (a request
    for one of those is a switch away, or refused naming the switch)."""
    running = upstream.model_ids if upstream is not None else ()
    data = [{**m, "running": True, "preset": upstream.preset_id}
            for m in upstream.models] if upstream is not None else []
    seen = set(running)
    for preset in sorted(catalog.presets.values(), key=lambda p: p.id):
        model = preset.model or preset.id
        if model in seen or (upstream is not None and model in upstream.aliases):
            continue
        seen.add(model)
        data.append({"id": model, "object": "model", "created": 0,
                     "owned_by": "sparkdeck", "running": False, "preset": preset.id})
    return {"object": "list", "data": data}
