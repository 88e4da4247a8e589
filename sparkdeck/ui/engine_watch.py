"""The engine poll: one long-lived reader thread that tells the app only what changed.

Before, a new worker asked Docker every 2 s, and each poll woke the UI thread several times
(three worker-state messages and two readings, re-rendered even when nothing had changed).
That was a fifth of the idle window's CPU: on an idle machine every wake-up costs about a
millisecond (docs/performance.md). This loop posts the readings only when they differ from
the last ones posted (or when a refresh asks for them, or an engine runs: its reading keeps
its watchdog alive), and asks Docker every `period` only
while something is in motion: an engine starting or not answering, Docker unreachable, no
event stream. When things are settled it waits on Docker's own event stream for sparkdeck's
containers (a start, a stop, a crash wakes it at once) and asks anyway every
QUIET_FACTOR periods, for what has no event: an attached engine, a ready engine's health.

While the sparkdeck service answers, the window does not ask Docker at all: the service's
guard follows Docker anyway and its word (`follow(feed)`: sparkdeck.ui.service_feed) is what
the readings are made of; a change of that word, or the feed going quiet, wakes the loop,
which asks Docker itself again from then on.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import fields
from typing import TYPE_CHECKING, Any

from textual.message import Message

from sparkdeck.runtime.errors import DockerRuntimeError, DockerUnavailable
from sparkdeck.ui.messages import EngineStateRead, engine_poll
from sparkdeck.ui.readers import EngineReader

if TYPE_CHECKING:
    from sparkdeck.runtime.state import EngineEvents
    from sparkdeck.ui.service_feed import DockerWord, ServiceFeed

QUIET_FACTOR = 5  # settled: ask every 10 s (with the default 2 s period), events meanwhile


class EngineWatch:
    def __init__(
        self, reader: EngineReader, post: Callable[[Message], object], period: float
    ) -> None:
        self._reader, self._post, self.period = reader, post, period
        self._wake = threading.Event()
        self._closed = threading.Event()
        self._force = True  # the first readings are always posted
        self._events: EngineEvents | None = None
        self._last: list[tuple] | None = None
        self._feed: ServiceFeed | None = None

    def follow(self, feed: ServiceFeed) -> None:
        """Take the engine's state from the service while `feed` is live (see the module)."""
        self._feed = feed
        feed.on_change(self._wake.set)
        self._wake.set()

    def poll_now(self) -> None:
        """Ask Docker again now and post the answer even if nothing changed (a refresh)."""
        self._force = True
        self._wake.set()

    def close(self) -> None:
        """End the watch for good (the window is closing): its wait ends now."""
        self._closed.set()
        self._wake.set()
        self._stop_events()

    def _stop_events(self) -> None:
        events, self._events = self._events, None
        if events is not None:
            events.close()

    def run(self, cancelled: threading.Event, keep_going: Callable[[], bool]) -> None:
        """The worker's body: read, post what changed, wait; until closed or cancelled."""
        if self._feed is not None:
            self._feed.first_look()  # the service's word first, if a service answers
        try:
            while not (cancelled.is_set() or self._closed.is_set()) and keep_going():
                self._wake.clear()
                force, self._force = self._force, False
                word = self._feed.docker if self._feed is not None else None
                if word is not None:
                    self._stop_events()  # the service follows Docker: no stream of ours
                messages = list(
                    engine_poll(self._reader) if word is None else word_messages(word, self._reader)
                )
                if cancelled.is_set():
                    return
                seen = [_key(message) for message in messages]
                # an engine's reading is posted at every poll even when unchanged: it is what
                # restarts a watchdog whose loop ended (WatchdogLine.follow)
                if force or seen != self._last or _has_engine(messages):
                    self._last = seen
                    for message in messages:
                        self._post(message)
                settled = _settled(messages) and (word is not None or self._follow_events())
                self._wake.wait(self.period * (QUIET_FACTOR if settled else 1))
        finally:
            self._stop_events()  # a cancelled run leaves no stream behind

    def _follow_events(self) -> bool:
        """Is Docker's event stream followed (opened now if it is not)?"""
        if self._events is not None:
            return True
        if self._closed.is_set():
            return False
        from sparkdeck.runtime.state import EngineEvents

        try:
            events = EngineEvents(self._reader.runtime())
        except (DockerUnavailable, DockerRuntimeError):
            return False
        self._events = events

        def pump() -> None:
            for _ in events:
                self._wake.set()
            if self._events is events:
                self._events = None  # the daemon went away: poll until it is back
            self._wake.set()

        threading.Thread(target=pump, name="docker events", daemon=True).start()
        return True


def word_messages(word: DockerWord, reader: EngineReader) -> list[Message]:
    """engine_poll's messages from the service's word instead of a Docker call of ours."""
    from sparkdeck.ui.messages import ChatTargetRead, DockerConnectionFailed
    from sparkdeck.ui.readers import EngineReading, chat_target

    if word.error is not None:
        failed = DockerConnectionFailed(word.error, word.not_answering)
        return [failed, ChatTargetRead(chat_target(None, reader.health_check))]
    reading = EngineReading(word.engine, word.healthy)
    return [EngineStateRead(reading), ChatTargetRead(chat_target(reading, reader.health_check))]


def _key(message: Any) -> tuple:  # a Message that is also a dataclass
    # the messages are dataclasses of frozen values: equal fields, the same news
    return (type(message), *(getattr(message, f.name) for f in fields(message)))


def _has_engine(messages: list[Message]) -> bool:
    return any(
        isinstance(message, EngineStateRead) and message.reading.engine is not None
        for message in messages
    )


def _settled(messages: list[Message]) -> bool:
    """Nothing is about to change by itself: Docker answered, and there is no engine or it
    is ready (or ended). A starting engine is asked at the full rate until it answers."""
    for message in messages:
        if isinstance(message, EngineStateRead):
            return message.reading.status != "starting"
    return False  # Docker did not answer
