"""One switch of the endpoint's engine, driven through the service's owner: the plan with
its fit check, the launch, the wait for its `launch-result`, and the new engine as the
endpoint reaches it. Also the wait for a launch a front end asked for (a window's switch,
`sparkdeck launch`), which the endpoint's queue treats as one more switch.

The scheduler that decides when a switch runs is switching.py; this module only runs one.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from starlette.concurrency import run_in_threadpool
from starlette.responses import JSONResponse

from sparkdeck.endpoint.refusals import openai_error

if TYPE_CHECKING:
    from sparkdeck.endpoint.upstream import Upstream, UpstreamFinder
    from sparkdeck.service.owner import EngineOwner

FIND_AFTER_S = 20.0  # longest wait for the endpoint to see the engine a launch made ready
NO_RETRY = {"x-should-retry": "false"}
GONE_CHECK_S = 0.5  # how often a launch that is waited for is checked for having ended

# what a switch ends with: the new engine, or the refusal its waiters get; (X, None) where
# a front end's launch took its place: X is that launch's engine (None: it failed)
Outcome = tuple["Upstream | None", "JSONResponse | None"]


class SwitchRunner:
    """Runs one switch (or follows one launch) at a time, for the scheduler."""

    def __init__(self, owner: EngineOwner, finder: UpstreamFinder, flush: bool) -> None:
        self._owner, self._finder, self._flush = owner, finder, flush

    async def switch_to(self, preset_id: str, planned: Callable[[], None]) -> Outcome:
        """Plan (refused with the fit lines when it does not fit), then launch and wait for
        the new engine. `planned` is called once the fit check passed (a stream may open)."""
        from sparkdeck.launch.lock_holder import Busy, UnknownPreset

        owner = self._owner
        flush = None if self._flush else False
        plan = await run_in_threadpool(owner.plan, preset_id, flush)
        if plan["fit"] is not None and not plan["fit"]["allowed"]:
            return None, openai_error(
                409,
                f"{preset_id} does not fit in memory, so the endpoint did not switch to "
                "it (the running engine keeps running):\n" + "\n".join(plan["fit_lines"]),
                "invalid_request_error",
                "model_does_not_fit",
                NO_RETRY,
            )
        planned()

        async def start() -> int | None:
            return await run_in_threadpool(owner.launch, preset_id, flush=flush)

        try:
            result = await self._result_of(start)
        except Busy as exc:
            flight = owner.in_flight
            if flight is None:  # a stop, not a launch: nothing to wait for
                return None, openai_error(
                    409,
                    f"cannot switch to {preset_id}: {exc}",
                    "invalid_request_error",
                    "switch_refused",
                    NO_RETRY,
                )
            # a front end's launch began meanwhile: it goes first, as if it had queued
            # first; the queue then decides again against the engine it made
            upstream, _ = await self.follow(*flight)
            return upstream, None
        except UnknownPreset as exc:
            return None, openai_error(
                409,
                f"cannot switch to {preset_id}: {exc}",
                "invalid_request_error",
                "switch_refused",
                NO_RETRY,
            )
        return await self._engine_after(preset_id, result)

    async def follow(self, launch_id: int, preset_id: str) -> Outcome:
        """The engine of a launch a front end asked the service for, once it is ready."""
        owner = self._owner

        async def running() -> int | None:  # None: it ended before the subscription
            flight = owner.in_flight
            return launch_id if flight is not None and flight[0] == launch_id else None

        return await self._engine_after(preset_id, await self._result_of(running))

    async def engine_now(self) -> Upstream | None:
        """The engine as the endpoint reaches it now (after a switch that did not happen)."""
        return (await self._finder.find(fresh=True))[0]

    async def _result_of(
        self, launched: Callable[[], Awaitable[int | None]]
    ) -> dict[str, Any] | None:
        """The launch-result of the launch `launched` names (None: it had ended already).
        The subscription is in place first, so a result published after it is not missed."""
        owner = self._owner
        events = owner.hub.subscribe()
        pending = asyncio.ensure_future(events.__anext__())
        await asyncio.sleep(0)  # the subscription is in place before the launch can finish
        try:
            launch_id = await launched()
            if launch_id is None:
                return None
            gone_since: float | None = None
            while True:
                # the next event, without cancelling the generator's read on a timeout
                done, _ = await asyncio.wait((pending,), timeout=GONE_CHECK_S)
                if done:
                    event = pending.result()
                    if event.kind == "launch-result" and event.data.get("launch") == launch_id:
                        return event.data
                    pending = asyncio.ensure_future(events.__anext__())
                    continue
                flight = owner.in_flight
                if flight is not None and flight[0] == launch_id:
                    gone_since = None
                elif gone_since is None:  # its result is published just after: a grace
                    gone_since = time.monotonic()
                elif time.monotonic() - gone_since > GONE_CHECK_S * 2:
                    # a launch whose plan failed ends with no result (its caller got the
                    # error): its waiters are told so, not kept waiting
                    return {
                        "launch": launch_id,
                        "ok": False,
                        "error": "the launch ended before it started (its plan failed)",
                    }
        finally:
            pending.cancel()  # (done already, unless the launch was refused or had ended)
            await asyncio.gather(pending, return_exceptions=True)  # the generator is let go
            await events.aclose()

    async def _engine_after(self, preset_id: str, result: dict[str, Any] | None) -> Outcome:
        """After the launch: its failure for the requests that wait for it, or the new
        engine once the endpoint reaches it."""
        if result is not None and not result.get("ok"):
            tail = "\n".join((result.get("log_tail") or [])[-5:])
            return None, openai_error(
                503,
                f"switching to {preset_id} failed: {result.get('error')}"
                + (f"\nthe engine's last log lines:\n{tail}" if tail else ""),
                "server_error",
                "switch_failed",
                NO_RETRY,
            )
        deadline = time.monotonic() + FIND_AFTER_S
        while True:  # the finder trusts what it saw for a second: asked afresh
            upstream, why = await self._finder.find(fresh=True)
            if upstream is not None and upstream.preset_id == preset_id:
                return upstream, None
            if time.monotonic() > deadline:
                return None, openai_error(
                    503,
                    f"{preset_id} started but the endpoint does not reach it: {why}",
                    "server_error",
                    "switch_failed",
                    NO_RETRY,
                )
            await asyncio.sleep(0.02)
