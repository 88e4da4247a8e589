"""Switch on request as a scheduler: one FIFO queue of requests by model.

With `[endpoint] switch_on_request = true` a request for a preset's model that does not run
makes the service do the switch the TUI does (EngineOwner.plan: what is stopped, the fit
check with its numbers; EngineOwner.launch: stop, wait for the memory to come back, flush,
start, ready; switch_runs.py), while that request waits. The endpoint keeps one queue:

- a request the running engine serves goes through at once, unless requests for another
  model wait and the running model's hold is over (then it queues behind them, so a busy
  client cannot keep the other one's model out forever);
- a request for another preset queues; the oldest waiter decides the next switch, which
  starts once the requests in flight on the running engine are done (a switch never cuts a
  reply off) and the model that loaded last has served for `[endpoint] min_hold_s`; when an
  engine is ready, every waiter it serves goes to it, in arrival order;
- a launch a front end asked the service for (a window's switch, `sparkdeck launch`) is one
  more switch in the same queue: requests that arrive while it runs wait for its engine,
  and are then served by it or switched for;
- a model no preset serves is refused at once (404, app.py), as with switching off.

At most `[endpoint] queue` requests wait (the one a running switch is for not counted);
more get 503 with Retry-After. A waiting stream is answered at once (200,
text/event-stream) once a switch's fit check has passed, or after `[endpoint] keepalive_s`
of waiting, and gets an SSE comment (`: loading <model>`) every `keepalive_s` so clients and
proxies with an idle timeout do not give up on it; with `[endpoint] loading_notice = true`
also a visible chunk whose `reasoning_content` says "loading <model>…". The wait ends the
moment the engine is ready (the keep-alive timer does not hold it). Its status is then
spent: a failure after that point is an SSE `data: {"error": ...}` event, which OpenAI
clients raise as an API error. Refusals before any byte went out keep their own status:
409 for a switch that does not fit (it clears once the user acts; 409 and not 507, which
clients read as a fault of the server), 503 for a failed launch. All carry
`x-should-retry: false` (the `openai` client retries 409 and 5xx otherwise).
"""

from __future__ import annotations

import asyncio
import threading
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from starlette.responses import JSONResponse
from starlette.types import Receive, Send

from sparkdeck.config.settings import EndpointSettings
from sparkdeck.endpoint.answers import body_part, client_closed, loading_notice, queue_full
from sparkdeck.endpoint.refusals import openai_error
from sparkdeck.endpoint.switch_runs import NO_RETRY, Outcome, SwitchRunner
from sparkdeck.launch.events import EventSink, RepliesAwaited

if TYPE_CHECKING:
    from sparkdeck.endpoint.upstream import Upstream, UpstreamFinder
    from sparkdeck.service.owner import EngineOwner


@dataclass(frozen=True)
class Admission:
    """Where a request goes after the switch it waited for (or why it does not)."""

    upstream: Upstream | None
    refusal: JSONResponse | None
    opened: bool  # a 200 event stream was begun while waiting: errors go in-stream
    waited_s: float


@dataclass(eq=False)
class _Waiter:
    """One queued request: the model it names and the preset that serves it (None: no
    switch is made for it; it goes to whatever engine runs when its turn comes)."""

    key: int  # its request record's id: the same key marks it in flight once admitted
    model: str | None
    preset: str | None
    result: asyncio.Future[Outcome]
    opening: asyncio.Event = field(default_factory=asyncio.Event)  # a stream may open
    counted: bool = True  # against [endpoint] queue (the one a switch runs for is not)


@dataclass(eq=False)
class _Switch:
    preset_id: str
    model: str
    started: float
    planned: bool = False  # the fit check passed (a stream may open)
    task: asyncio.Task[None] | None = None


class SwitchGate:
    """The endpoint's scheduler: serves, queues, switches, bounds the queue."""

    def __init__(
        self, owner: EngineOwner | None, settings: EndpointSettings, finder: UpstreamFinder
    ) -> None:
        self._owner, self._settings, self._finder = owner, settings, finder
        self._runner = (
            SwitchRunner(owner, finder, settings.switch_flush) if owner is not None else None
        )
        self._switch: _Switch | None = None
        self._queue: list[_Waiter] = []
        # the records of requests admitted and not done: whether each went to sparkdeck's
        # engine (an attached one is not stopped by a launch); `own_replies` counts those,
        # read by a launch's thread (await_replies)
        self._serving: dict[int, bool] = {}
        self.own_replies = 0
        self._engine: Upstream | None = None  # what runs, as last found or switched to
        self._hold_until = 0.0  # the model that loaded last serves until then at least
        self._timer: asyncio.TimerHandle | None = None
        self.last_switch_s: float | None = None

    async def admit(
        self, record: dict[str, Any], upstream: Upstream | None, receive: Receive, send: Send
    ) -> Admission:
        """Where the request goes: `upstream` as found when nothing is scheduled ahead of
        it, else after its turn in the queue (the wait is written into its request-log
        `record`). Every admitted request is in flight until `finished(record)`."""
        model, key = record["model"], id(record)
        if (
            self._switch is None
            and not self._queue
            and self._serves(upstream, model)
            and (self._owner is None or self._owner.in_flight is None)
        ):  # the hot path
            self._engine = upstream
            self._serve(key, upstream)
            return Admission(upstream, None, False, 0.0)
        preset = await self._home(model, upstream)
        self._follow_front_end()
        if self._switch is None:
            self._engine = upstream
            serves = self._serves(upstream, model)
            if (serves and (not self._queue or time.monotonic() < self._hold_until)) or (
                not serves and preset is None
            ):  # served, or refused by app.py
                self._serve(key, upstream)
                return Admission(upstream, None, False, 0.0)
        waiting = sum(w.counted for w in self._queue)
        if waiting >= self._settings.queue:
            return Admission(None, self._queue_full(waiting), False, 0.0)
        waiter = _Waiter(key, model, preset, asyncio.get_running_loop().create_future())
        if self._switch is not None and self._switch.planned:
            waiter.opening.set()
        self._queue.append(waiter)
        self._dispatch()
        return await self._wait(waiter, record, receive, send)

    def finished(self, record: dict[str, Any]) -> None:
        """The request is done (answered, refused or gone): a switch may be its turn."""
        key = id(record)
        if key in self._serving:
            self.own_replies -= self._serving.pop(key)
            if not self._serving and self._queue:
                self._dispatch()

    def _serve(self, key: int, upstream: Upstream | None) -> None:
        own = upstream is not None and upstream.preset_id is not None
        self._serving[key] = own
        self.own_replies += own

    def await_replies(
        self, on_event: EventSink, cancel: threading.Event | None, skip: threading.Event | None
    ) -> None:
        """A launch a front end asked for waits here, in its own thread, before it stops
        anything: for the replies in flight on sparkdeck's engine to finish (requests that
        come meanwhile queue behind the launch), `[endpoint] finish_replies_s` at most, or
        until the launch is cancelled or its wait skipped."""
        count, limit = self.own_replies, self._settings.finish_replies_s
        if count <= 0 or limit <= 0:
            return
        began = time.monotonic()
        on_event(RepliesAwaited(count, limit))
        while count > 0 and time.monotonic() - began < limit:
            if any(flag is not None and flag.is_set() for flag in (cancel, skip)):
                break
            time.sleep(0.05)
            count = self.own_replies
        on_event(RepliesAwaited(max(count, 0), limit, time.monotonic() - began, done=True))

    # ----- the queue -----------------------------------------------------------------------

    @staticmethod
    def _serves(engine: Upstream | None, model: str | None) -> bool:
        return engine is not None and (
            model is None or model in engine.model_ids or model in engine.aliases
        )

    async def _home(self, model: str | None, upstream: Upstream | None) -> str | None:
        """The preset a switch for this model goes to (None: no switch is made for it)."""
        if not self._settings.switch_on_request or self._owner is None or model is None:
            return None
        if self._serves(upstream, model):
            return upstream.preset_id if upstream is not None else None
        # one on its way up is waited for, not re-run. While a switch runs, the engine the
        # guard still holds as ready is the one being taken down (not gone from Docker
        # yet): a request for it waits for a switch back. Taken for one starting, such a
        # request got no switch and went to the next engine, which refused its model in
        # the stream it had opened (tests/integration/test_endpoint_queue.py, 2026-12-04)
        follower = self._owner.follower
        starting = follower.engine
        going = self._switch is not None and follower.ready
        if starting is not None and not going and model in (starting.preset_id, starting.name):
            return None
        catalog = await self._finder.presets()
        named = [
            p
            for p in sorted(catalog.presets.values(), key=lambda p: p.id)
            if model in (p.id, p.model)
        ]
        return named[0].id if named else None

    def _follow_front_end(self) -> None:
        """A launch a front end asked the service for is a switch of the queue's own."""
        flight = self._owner.in_flight if self._owner is not None else None
        if self._switch is None and flight is not None and self._runner is not None:
            launch_id, preset_id = flight
            switch = _Switch(preset_id, preset_id, time.monotonic())
            self._start(switch, self._runner.follow(launch_id, preset_id))
            self._planned(switch)  # its plan was confirmed already: a stream may open

    def _dispatch(self, loaded: bool = False) -> None:
        """Hand the engine that runs the waiters it serves; start the next switch when its
        turn came (hold over, nothing in flight). An engine that just `loaded` gets every
        waiter it serves; else only those ahead of the first that waits for a switch."""
        if self._switch is not None:
            return
        engine, blocked = self._engine, False
        for waiter in list(self._queue):
            if self._serves(engine, waiter.model):
                if loaded or not blocked:
                    self._admit(waiter, (engine, None))
            elif waiter.preset is None or (
                loaded and engine is not None and waiter.preset == engine.preset_id
            ):
                # no switch serves it (app.py refuses it now), or the switch made for it
                # ran: the engine answers (or refuses) it, never a second switch to the same
                self._admit(waiter, (engine, None))
            else:
                blocked = True
        if not self._queue:
            return
        left = self._hold_until - time.monotonic()
        if left > 0:
            if self._timer is None:

                def again() -> None:
                    self._timer = None
                    self._dispatch()

                self._timer = asyncio.get_running_loop().call_later(left, again)
            return
        if self._serving or self._runner is None:
            return  # finished() calls again once the last request in flight is done
        if self._owner is not None and self._owner.in_flight is not None:
            self._follow_front_end()
            return
        head = self._queue[0]
        assert head.preset is not None
        head.counted = False
        switch = _Switch(head.preset, head.model or head.preset, time.monotonic())
        self._start(switch, self._runner.switch_to(head.preset, lambda: self._planned(switch)))

    def _start(self, switch: _Switch, run: Any) -> None:
        self._switch = switch
        switch.task = asyncio.ensure_future(self._run(switch, run))

    def _planned(self, switch: _Switch) -> None:
        switch.planned = True
        for waiter in self._queue:
            waiter.opening.set()

    async def _run(self, switch: _Switch, run: Any) -> None:
        runner = self._runner
        assert runner is not None
        try:
            upstream, refusal = await run
        except Exception as exc:  # noqa: BLE001 - every waiting request gets the reason
            upstream, refusal = (
                None,
                openai_error(
                    503,
                    f"switching to {switch.preset_id} failed: {exc}",
                    "server_error",
                    "switch_failed",
                    NO_RETRY,
                ),
            )
        if upstream is None:
            try:
                upstream = await runner.engine_now()
            except Exception:  # noqa: BLE001 - no engine known: waiters get "no engine"
                upstream = None
        else:  # a model that just loaded serves its queue for min_hold_s at least
            self._hold_until = time.monotonic() + self._settings.min_hold_s
        self._engine = upstream
        self._switch = None
        self.last_switch_s = time.monotonic() - switch.started
        if self._owner is not None:  # the switch as the endpoint saw it: for front ends,
            # the flight record and the figure its waiters' waits are judged against
            self._owner.hub.publish(
                "endpoint-switch",
                preset=switch.preset_id,
                took_s=round(self.last_switch_s, 3),
                ok=refusal is None and upstream is not None,
            )
        if refusal is not None:  # those that wait for this preset get why it did not run
            for waiter in list(self._queue):
                if waiter.preset == switch.preset_id:
                    self._admit(waiter, (None, refusal))
        self._dispatch(loaded=True)

    def _admit(self, waiter: _Waiter, outcome: Outcome) -> None:
        self._queue.remove(waiter)
        if not waiter.result.done():
            waiter.result.set_result(outcome)
            if outcome[1] is None:
                self._serve(waiter.key, outcome[0])

    def _queue_full(self, waiting: int) -> JSONResponse:
        switch, last = self._switch, self.last_switch_s or 10.0
        if switch is not None:
            left, what = last - (time.monotonic() - switch.started), f"to {switch.model!r}"
        else:
            left, what = max(0.0, self._hold_until - time.monotonic()) + last, "engines"
        return queue_full(what, waiting, left)

    async def _wait(
        self, waiter: _Waiter, record: dict[str, Any], receive: Receive, send: Send
    ) -> Admission:
        began, opened, stream = time.monotonic(), False, record["stream"]
        # a client that gives up while it waits leaves the queue at once (its place is not
        # held until its turn); a switch that runs goes on for the others
        gone = asyncio.ensure_future(_disconnect(receive))
        opening = asyncio.ensure_future(waiter.opening.wait())
        every = self._settings.keepalive_s
        try:
            await asyncio.wait(
                (waiter.result, gone, *((opening,) if stream else ())),
                timeout=every if stream else None,
                return_when=asyncio.FIRST_COMPLETED,
            )
            while stream and not waiter.result.done() and not gone.done():
                model = (
                    self._switch.model
                    if self._switch is not None
                    else (waiter.model or waiter.preset or "the model")
                )
                if not opened:
                    opened = True
                    await send(
                        {
                            "type": "http.response.start",
                            "status": 200,
                            "headers": [
                                (b"content-type", b"text/event-stream"),
                                (b"cache-control", b"no-cache"),
                            ],
                        }
                    )
                    if self._settings.loading_notice and record["path"].endswith(
                        "/chat/completions"
                    ):
                        await send(body_part(loading_notice(model)))
                await send(body_part(f": loading {model}\n\n".encode()))
                # the first of the two ends the pause: the switch being over, or the client
                # gone (waiting for both held every stream for the whole keep-alive period)
                await asyncio.wait(
                    (waiter.result, gone), timeout=every, return_when=asyncio.FIRST_COMPLETED
                )
        finally:
            gone.cancel()
            opening.cancel()
            if not waiter.result.done():  # gone: out of the queue, the turn passes on
                waiter.result.cancel()
                if waiter in self._queue:
                    self._queue.remove(waiter)
                self._dispatch()
        record["waited_s"] = waited = round(time.monotonic() - began, 3)
        if waiter.result.cancelled():  # gone: 499 (nginx's "client closed request"), logged
            target = waiter.preset or waiter.model or "the next engine"
            return Admission(None, client_closed(target), opened, waited)
        upstream, refusal = waiter.result.result()
        return Admission(upstream, refusal, opened, waited)


async def _disconnect(receive: Receive) -> None:
    while (await receive())["type"] != "http.disconnect":
        pass
