"""The service's event hub: threads publish, each event-stream client gets its own queue.

Publishers are plain threads (the watchdog, the launch, the samplers); subscribers are the
API's event streams on the server's asyncio loop. A client that reads too slowly loses its
oldest events rather than growing the service's memory: the stream is for watching, and the
latest value of each kind is always in `latest` (what GET /v1/status returns).
"""

from __future__ import annotations

import asyncio
import itertools
import threading
import time
from collections.abc import AsyncGenerator, Iterable
from dataclasses import dataclass
from typing import Any

QUEUE_LIMIT = 1000  # events held per slow client before its oldest are dropped


@dataclass(frozen=True)
class Event:
    id: int
    kind: str  # engine, launch, launch-result, guard, stop-attempt, telemetry, metrics, note,
    # docker (Docker's word on sparkdeck's engine: GuardFollower)
    at: float  # wall clock
    data: dict[str, Any]

    def to_dict(self) -> dict[str, Any]:
        return {"id": self.id, "kind": self.kind, "at": self.at, **self.data}


class EventHub:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._ids = itertools.count(1)
        # (loop, queue, the kinds it wants: None for all)
        self._subscribers: list[
            tuple[asyncio.AbstractEventLoop, asyncio.Queue[Event], frozenset[str] | None]
        ] = []
        self._wakers: list[tuple[str, asyncio.AbstractEventLoop, asyncio.Event]] = []
        self.latest: dict[str, Event] = {}

    def publish(self, kind: str, **data: Any) -> Event:
        with self._lock:
            event = Event(next(self._ids), kind, time.time(), data)
            self.latest[kind] = event
            subscribers = [
                (loop, queue)
                for loop, queue, kinds in self._subscribers
                if not kinds or kind in kinds
            ]
            wakers = [(loop, flag) for wanted, loop, flag in self._wakers if wanted == kind]
        for loop, queue in subscribers:
            try:
                loop.call_soon_threadsafe(_put, queue, event)
            except RuntimeError:  # that client's loop is closed: it is going away
                pass
        for loop, flag in wakers:
            try:
                loop.call_soon_threadsafe(flag.set)
            except RuntimeError:
                pass
        return event

    def wakes(self, kind: str) -> asyncio.Event:
        """An event of the running loop, set whenever a `kind` event is published (the
        caller clears it): a task can sleep until something changes instead of polling."""
        flag = asyncio.Event()
        with self._lock:
            self._wakers.append((kind, asyncio.get_running_loop(), flag))
        return flag

    async def subscribe(
        self, replay: Iterable[str] = (), kinds: frozenset[str] | None = None
    ) -> AsyncGenerator[Event, None]:
        """Every event published from now on (of `kinds` only, when given: the others never
        wake the subscriber's loop), in order, until the caller stops iterating; first the
        latest event of each kind in `replay` (taken under the same lock as the
        subscription: none is lost or sent twice in between)."""
        queue: asyncio.Queue[Event] = asyncio.Queue()
        entry = (asyncio.get_running_loop(), queue, kinds)
        with self._lock:
            self._subscribers.append(entry)
            first = [self.latest[kind] for kind in replay if kind in self.latest]
        try:
            for event in first:
                yield event
            while True:
                yield await queue.get()
        finally:
            with self._lock:
                self._subscribers.remove(entry)

    @property
    def subscribers(self) -> int:
        with self._lock:
            return len(self._subscribers)


def _put(queue: asyncio.Queue[Event], event: Event) -> None:
    if queue.qsize() >= QUEUE_LIMIT:
        queue.get_nowait()  # the slow client loses its oldest event, not the service memory
    queue.put_nowait(event)
