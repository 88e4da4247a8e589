"""A front end's guard: it relays the service's watchdog while the service answers, and runs
its own watchdog while it does not.

When the service runs, it guards the engine; a second watchdog in a window would only decide
twice and stop twice. So a window (the TUI's guard line, `sparkdeck guard`) follows the
service's event stream and hands each guard decision, stop attempt and guard stop on as
typed events (guard_events; ServiceControl.guard builds this loop). The stream carries a
keep-alive every second: SILENCE_S without a byte, or the stream ending, and the window
asks the heartbeat (liveness.py) why. A service that is gone is started again (it adopts
the engine); one that does not answer (stopped, wedged) cannot be replaced while it holds
its lock, so the window guards the engine with its own watchdog and says so (TakenOver:
the front end shows it in the warning colour), and hands back when the heartbeat answers
again (never in the middle of a stop it is carrying out).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from functools import partial
from typing import TYPE_CHECKING, Any

from sparkdeck.service import ServiceError
from sparkdeck.service.client import ServiceClient
from sparkdeck.service.guard_events import (
    GUARD_KINDS,
    GuardNote,
    GuardSink,
    GuardStopped,
    GuardStream,
    LocalGuard,
    ServiceDecided,
    ServiceGuards,
    StopTried,
    TakenOver,
)
from sparkdeck.service.liveness import NOT_RUNNING, OFF, Liveness, probe

if TYPE_CHECKING:
    from sparkdeck.guard.watchdog import Watchdog

# Keep-alives come every second (api.PING_S): 1.3 s of silence, then a 0.5 s heartbeat,
# tell a window within liveness.HEARTBEAT_S that nobody answers.
SILENCE_S = 1.3
CLASSIFY_S = 0.5
PROBE_EVERY_S = 1.0  # while a window guards: how often it asks whether the service is back
RESTART_EVERY_S = 30.0  # a service that failed to start is not tried again sooner
# Only what the relay hands on (guard_events.GUARD_KINDS): the service then never sends (nor
# the relay parses) the telemetry and metrics events, several a second with an engine up. The
# guard's decision comes every second, and the filtered stream's keep-alive after a second
# without an event, so the silence test above holds. Nothing is replayed: a stream that starts
# after an earlier engine was stopped by the guard must not report that stop for this engine.
# A window whose service feed is live relays from the feed's stream instead (its `stream`):
# one stream and one thread read the service's events, not two (ui.service_feed).


def relay_guard(
    client: ServiceClient,
    done: threading.Event,
    on_event: GuardSink,
    silence_s: float = SILENCE_S,
    leave: Callable[[], bool] = lambda: False,
) -> bool | None:
    """Relay from a stream of the guard's kinds of its own, until `done` (True) or the
    stream ends, fails or is silent for `silence_s` (False), or `leave()` says to (None,
    between two events). Something comes every second, so `done` is seen within about a
    second."""
    try:
        with client.events(read_timeout=silence_s, kinds=GUARD_KINDS, replay=()) as events:
            for kind, data in events:
                if done.is_set():
                    return True
                hand_on(kind, data, on_event)
                if leave():
                    return None
    except Exception:  # noqa: BLE001 - the stream broke or went quiet (httpx, JSON)
        pass
    return done.is_set()


def hand_on(kind: str, data: dict[str, Any], on_event: GuardSink) -> None:
    """One of the service's events as the guard event it means for a front end (the
    guard's decision, a stop attempt, a guard stop); any other is not the guard's."""
    from sparkdeck.guard.stopper import StopAttempt

    if kind == "guard":
        on_event(ServiceDecided(data["level"], data["text"], tuple(data.get("reasons", ()))))
    elif kind == "stop-attempt":
        on_event(StopTried(StopAttempt(bool(data["done"]), str(data["text"]), int(data["killed"]))))
    elif kind == "engine" and data.get("state") == "stopped by the guard":
        on_event(GuardStopped("; ".join(data.get("reasons", ())), str(data.get("record") or "")))


class FrontGuard:
    """The guard loop of one window for one engine: `run()` until `done` is set or the
    window's own watchdog has stopped the engine. `watchdog` is the window's (built by
    control.own_watchdog: it reports as guard events too); it runs only while the service
    does not answer."""

    def __init__(
        self,
        watchdog: Watchdog,
        done: threading.Event,
        hz: Callable[[], float],
        on_event: GuardSink,
        stream: GuardStream | None = None,
    ) -> None:
        self.watchdog, self.done, self.hz, self.on_event = watchdog, done, hz, on_event
        self.stream = stream  # the window's service feed's, when it has one (else our own)
        self.guarding_here = False  # the window's own watchdog runs now
        self._start_failed_at: float | None = None

    def run(self) -> None:
        life = probe()
        while not self.done.is_set() and self.watchdog.stopped_by is None:
            if life.state == OFF:  # switched off since the control was chosen: guard here
                LocalGuard(self.watchdog, self.done, self.hz, self.on_event).run()
                return
            client = self._start() if life.state == NOT_RUNNING else None
            if life.usable:
                client = _connect()
                if client is not None:
                    self.on_event(
                        ServiceGuards(
                            life.pid,
                            f"the sparkdeck service (process {life.pid}) guards "
                            "the engine, with or without this window",
                        )
                    )
            if client is not None:
                began = time.monotonic()
                with client:
                    if self._relay(client):
                        return
                if self.done.is_set():
                    return
                life = probe(CLASSIFY_S)  # why did the stream end?
                if life.usable:
                    # only the stream broke: follow it again (not in a tight loop when it
                    # breaks at once, whatever the reason)
                    if time.monotonic() - began < PROBE_EVERY_S and self.done.wait(PROBE_EVERY_S):
                        return
                    continue
            self.on_event(TakenOver(life))
            life = self._guard_until_back()

    def _relay(self, client: ServiceClient) -> bool:
        """Relay the service's guard until `done` (True) or the stream breaks or is silent
        (False): on the window's feed while it is live (its thread hands the events on;
        this one sleeps), else on a stream of this relay's own until the feed is live."""
        feed = self.stream
        while True:
            if feed is not None:
                handle = partial(hand_on, on_event=self.on_event)
                relayed = feed.relay_guard(handle, self.done, SILENCE_S)
                if relayed is not None:
                    return relayed
            relayed = relay_guard(client, self.done, self.on_event, leave=self._feed_live)
            if relayed is not None:
                return relayed

    def _feed_live(self) -> bool:
        return self.stream is not None and self.stream.live

    def _start(self) -> ServiceClient | None:
        """Start a service that is gone (it adopts and guards the engine); None if it fails
        or failed less than RESTART_EVERY_S ago."""
        from sparkdeck.service.client import ensure_running

        failed = self._start_failed_at
        if failed is not None and time.monotonic() - failed < RESTART_EVERY_S:
            return None
        try:
            client, started = ensure_running()
        except ServiceError as exc:
            self._start_failed_at = time.monotonic()
            self.on_event(GuardNote(f"the sparkdeck service did not start: {exc}"))
            return None
        try:
            pid = client.heartbeat()["pid"]
        except ServiceError as exc:  # started, and gone or wedged again at once
            client.close()
            self._start_failed_at = time.monotonic()
            self.on_event(GuardNote(f"the sparkdeck service started but does not answer: {exc}"))
            return None
        self.on_event(
            ServiceGuards(
                pid,
                f"started the sparkdeck service (process {pid}): it guards the "
                "engine, with or without this window"
                if started
                else f"the sparkdeck service (process {pid}) guards the engine, with or "
                "without this window",
            )
        )
        return client

    def _guard_until_back(self) -> Liveness:
        """The window's own watchdog guards until the service answers again, or is gone and
        may be started again; what the last heartbeat said."""
        until = threading.Event()
        said: list[Liveness] = [Liveness(NOT_RUNNING)]

        def ask() -> None:
            while not until.is_set():
                if self.done.wait(PROBE_EVERY_S):
                    break
                if self.watchdog.stop_pending:
                    continue  # a stop under way is carried out here, whatever answers
                life = probe()
                said[0] = life
                restartable = life.state == NOT_RUNNING and (
                    self._start_failed_at is None
                    or time.monotonic() - self._start_failed_at >= RESTART_EVERY_S
                )
                if life.usable or restartable:
                    break
            until.set()

        self.watchdog.window.clear()  # readings from an earlier turn are not consecutive
        self.guarding_here = True
        asker = threading.Thread(target=ask, name="service heartbeat", daemon=True)
        asker.start()
        try:
            self.watchdog.run(until, self.hz)
        finally:
            self.guarding_here = False
            until.set()
            asker.join(timeout=PROBE_EVERY_S + 3)
        return said[0]


def _connect() -> ServiceClient | None:
    from sparkdeck.service.client import running

    try:
        return running()
    except ServiceError:
        return None


def hand_over() -> str | None:
    """After a window closes: when a sparkdeck engine runs and no service does, start the
    service so the engine stays guarded. What was done, for the user; None when nothing was
    needed (or the service is turned off)."""
    from sparkdeck.runtime import current_engine
    from sparkdeck.service import location
    from sparkdeck.service.client import ensure_running

    if not location.enabled():
        return None
    _, engine = current_engine()
    if engine is None or not engine.alive:
        return None
    try:
        client, started = ensure_running()
    except ServiceError as exc:
        return (
            f"{engine.preset_id or engine.name} keeps running UNGUARDED: the sparkdeck "
            f"service did not start ({exc})"
        )
    with client:
        pid = client.status()["pid"]
    if not started:
        return None
    return (
        f"{engine.preset_id or engine.name} keeps running: handed to the sparkdeck "
        f"service (process {pid}), which guards its memory from now on"
    )
