"""The service's watchdog follower: every sparkdeck engine is guarded from start to removal.

A plain loop (a thread of the service) that asks Docker every FOLLOW_S which sparkdeck engine
runs, and keeps one watchdog (sparkdeck.guard.watchdog, the one factory) on it: at the start-
up rate until the engine first answers its health check, at the running rate after. Whoever
launched the engine (the service, the CLI with the service off, a TUI, a launch killed half
way) makes no difference. A Docker daemon that does not answer ends nothing: the watchdog
keeps deciding (it reads /proc, not Docker) and its stopper falls back to killing the
container's processes directly. The one engine this loop leaves alone is the one the
service's own launch is starting: that launch runs its own start-up watchdog until ready.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sparkdeck.guard import records
from sparkdeck.guard.policy import Decision
from sparkdeck.guard.stopper import DOCKER_TIMEOUT_S, StopAttempt
from sparkdeck.guard.watchdog import Watchdog, engine_watchdog
from sparkdeck.service.hub import EventHub

if TYPE_CHECKING:
    from sparkdeck.config.settings import GuardSettings
    from sparkdeck.runtime.client import DockerRuntime
    from sparkdeck.runtime.state import EngineEvents, EngineState

# Docker's event stream wakes the loop when a container of sparkdeck's changes; it also asks
# Docker every SAFETY_POLL_S in case an event was missed, and every FOLLOW_S while it has no
# event stream (a daemon restarting) or a starting engine's health is awaited. The safety
# poll is rare because each costs an idle service about 15 ms of CPU (a cold wake-up and the
# docker SDK's request), and the watchdog guards from /proc whatever Docker says meanwhile.
SAFETY_POLL_S = 30.0
FOLLOW_S = 2.0
HEALTH_EVERY_S = 2.0  # how often a starting engine's health is asked (the rate switch)


class GuardFollower:
    def __init__(
        self,
        hub: EventHub,
        guard: GuardSettings,
        runtime: Callable[[], DockerRuntime],
        health: Callable[[EngineState], bool],
        launching: Callable[[], str | None] = lambda: None,
    ) -> None:
        self.hub = hub
        self.guard = guard
        self._runtime = runtime
        self._health = health
        self._launching = launching  # the container id the service's own launch starts
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.engine: EngineState | None = None  # the engine guarded now
        self.dog: Watchdog | None = None
        self.ready = False
        # Bumped after every change of `engine` or `ready` (guarded, ready, gone): the
        # endpoint keeps the engine it found until this moves, instead of asking again on
        # a request's path (endpoint/upstream.py)
        self.changes = 0
        self._until: threading.Event | None = None
        self._docker_silent = False
        # Docker's event stream while it is open (runtime.watch)
        self._events: EngineEvents | None = None
        self._wake = threading.Event()  # look at Docker now (an event, a launch's end)
        self._told: dict[str, Any] | None = None  # the last `docker` event's word
        # The guard's last stop, kept in memory for `service status`: with the engine gone
        # and a full disk, it is the only place that still says what the guard did and why.
        self.last_stop: dict[str, object] | None = None

    def start(self) -> None:
        self._thread = threading.Thread(target=self._follow, name="guard-follower", daemon=True)
        self._thread.start()

    def wake(self) -> None:
        """Look again now: the service's own launch has ended, its engine is ours to guard."""
        self._wake.set()

    def close(self) -> None:
        self._stop.set()
        self._wake.set()
        if self._events is not None:
            self._events.close()
        if self._until is not None:
            self._until.set()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def describe(self) -> dict[str, object]:
        dog, engine = self.dog, self.engine
        last = self.hub.latest.get("guard")
        records.write_held()  # a status asked for is a good moment to see if space is back
        return {
            "guarding": engine.name if engine is not None and dog is not None else None,
            "preset_id": engine.preset_id if engine is not None else None,
            "hz": self._hz() if dog is not None else None,
            "mode": self.guard.mode,
            "stop_pending": bool(dog and dog.stop_pending),
            "last_decision": last.data if last is not None else None,
            "last_stop": self._last_stop(),
            "unwritten": records.held_actions(),
        }

    def _hz(self) -> float:
        return self.guard.running_hz if self.ready else self.guard.startup_hz

    # ----- the loop ------------------------------------------------------------------------

    def _follow(self) -> None:
        runtime: DockerRuntime | None = None
        wake = self._wake
        while not self._stop.is_set():
            try:
                runtime = runtime or self._runtime().with_timeout(DOCKER_TIMEOUT_S)
                if self._events is None:
                    self._listen(runtime, wake)
                wake.clear()
                current = runtime.current()
            except Exception as exc:  # noqa: BLE001 - unreachable or hung: keep guarding
                self._tell_docker(None, exc)
                if not self._docker_silent:
                    self.hub.publish(
                        "note",
                        text=f"cannot ask Docker which engine runs "
                        f"({_first_line(exc)}); the watchdog keeps guarding",
                    )
                self._docker_silent = True
                self._stop.wait(FOLLOW_S)
                continue
            if self._docker_silent:
                self.hub.publish("note", text="Docker answers again")
            self._docker_silent = False
            guarded = self.engine.container_id if self.engine is not None else None
            alive = current if current is not None and current.alive else None
            if alive is not None and alive.container_id == guarded:
                self.engine = alive  # its state as Docker says now ("created" -> "running")
            if guarded is not None and (alive is None or alive.container_id != guarded):
                self._release(
                    "the engine is gone" if alive is None else "another engine replaced it"
                )
            elsewhere = False
            if alive is not None and self.engine is None:
                elsewhere = _launching_elsewhere()
                if alive.container_id != self._launching() and not elsewhere:
                    self._guard(runtime, alive)
            if self.engine is not None and not self.ready:
                self._check_ready()
            self._tell_docker(current)
            # records a full disk held back: written as soon as there is room again
            held = records.write_held() > 0
            quiet = (
                self._events is not None
                and not elsewhere
                and not held
                and (self.engine is None or self.ready)
            )
            wake.wait(SAFETY_POLL_S if quiet else FOLLOW_S)

    def _listen(self, runtime: DockerRuntime, wake: threading.Event) -> None:
        """Follow Docker's events in a thread of their own; each wakes the loop at once."""
        from sparkdeck.runtime.state import EngineEvents

        self._events = events = EngineEvents(runtime)

        def pump() -> None:
            for _ in events:
                wake.set()
            self._events = None  # the stream ended: poll until the next loop reconnects
            wake.set()

        threading.Thread(target=pump, name="docker events", daemon=True).start()

    def _tell_docker(self, current: EngineState | None, error: Exception | None = None) -> None:
        """Publish Docker's word on sparkdeck's engine (a `docker` event) when it differs
        from the last one: what a window's engine card shows, so that a window connected to
        the service does not ask Docker itself (sparkdeck.ui.service_feed)."""
        from sparkdeck.runtime.errors import DockerNotAnswering

        word = {
            "engine": current.to_dict() if current is not None else None,
            # healthy: the guard's readiness (its health check) of the engine it follows
            "healthy": current is not None
            and self.engine is not None
            and current.container_id == self.engine.container_id
            and self.ready,
            "error": (str(error) or type(error).__name__) if error is not None else None,
            "not_answering": isinstance(error, DockerNotAnswering),
        }
        if word != self._told:
            self._told = word
            self.hub.publish("docker", **word)

    def _check_ready(self) -> None:
        engine = self.engine
        now = time.monotonic()
        if engine is None or now - getattr(self, "_asked_at", 0.0) < HEALTH_EVERY_S:
            return
        self._asked_at = now
        if self._health(engine):
            self.ready = True
            self.changes += 1
            self.hub.publish("engine", state="ready", name=engine.name, preset_id=engine.preset_id)

    def _guard(self, runtime: DockerRuntime, engine: EngineState) -> None:
        self.engine, self.ready, self._asked_at = engine, False, 0.0
        self.changes += 1
        self._check_ready()
        until = self._until = threading.Event()
        self.dog = dog = engine_watchdog(
            self.guard,
            runtime,
            engine,
            on_decision=self._decided,
            on_attempt=self._attempted,
            on_error=self._failed,
        )
        self.hub.publish(
            "engine",
            state="guarded",
            name=engine.name,
            preset_id=engine.preset_id,
            container_id=engine.container_id,
        )
        threading.Thread(
            target=self._watch, args=(dog, until, engine), name="watchdog", daemon=True
        ).start()

    def _watch(self, dog: Watchdog, until: threading.Event, engine: EngineState) -> None:
        dog.run(until, self._hz)
        if dog.stopping is not None:
            self._note_stop(dog, engine)
        if dog.stopped_by is not None:
            self.hub.publish(
                "engine",
                state="stopped by the guard",
                name=engine.name,
                preset_id=engine.preset_id,
                reasons=list(dog.stopped_by.reasons),
                record=str(dog.stop_record or ""),
            )

    def _release(self, why: str) -> None:
        engine, dog = self.engine, self.dog
        if dog is not None and dog.stop_pending:
            return  # its own stop is still being carried out: never let go of that
        if self._until is not None:
            self._until.set()
        self.engine, self.dog, self._until, self.ready = None, None, None, False
        self.changes += 1
        if engine is not None:
            self.hub.publish(
                "engine", state="gone", name=engine.name, preset_id=engine.preset_id, why=why
            )

    # ----- the watchdog's reports ----------------------------------------------------------

    def _decided(self, decision: Decision) -> None:
        engine = self.engine
        self.hub.publish("guard", engine=engine.name if engine else "", **decision.to_dict())

    def _attempted(self, attempt: StopAttempt) -> None:
        dog, engine = self.dog, self.engine
        if dog is not None and engine is not None and dog.stopping is not None:
            self._note_stop(dog, engine)
        self.hub.publish("stop-attempt", **attempt.to_dict())

    def _note_stop(self, dog: Watchdog, engine: EngineState) -> None:
        stopping = dog.stopping
        assert stopping is not None
        last = dog.attempts[-1] if dog.attempts else None
        earlier = self.last_stop
        same = earlier is not None and earlier.get("key") == id(stopping)
        self.last_stop = {
            "key": id(stopping),
            "engine": engine.name,
            "preset_id": engine.preset_id,
            "at": earlier["at"] if same and earlier else time.strftime("%Y-%m-%d %H:%M:%S"),
            "reasons": list(stopping.reasons),
            "done": dog.stopped_by is not None,
            "result": last.text if last else "not tried",
            "record": str(dog.stop_record) if dog.stop_record else None,
        }

    def _last_stop(self) -> dict[str, object] | None:
        """The last stop, with whether its record is on disk yet (a full disk holds it)."""
        stop = self.last_stop
        if stop is None:
            return None
        record = stop["record"]
        return {
            **{k: v for k, v in stop.items() if k != "key"},
            "record_written": bool(record) and Path(str(record)).is_file(),
        }

    def _failed(self, exc: Exception) -> None:
        self.hub.publish("note", text=f"watchdog: {_first_line(exc)}; trying again")


def _launching_elsewhere() -> bool:
    """Does another live process hold the launch lock (a TUI's or a `SPARKDECK_SERVICE=off`
    CLI's launch)? Its own start-up watchdog guards the engine it starts until it is ready;
    the follower takes over when the lock is let go. Read from the holder's note, not by
    taking the lock: trying it would make that process's launch fail as "in progress". A
    note left by a killed holder names a dead process and counts for nothing."""
    import os

    from sparkdeck.config.file_lock import FileLock
    from sparkdeck.launch.lock_holder import LAUNCH_LOCK

    holder = FileLock(LAUNCH_LOCK).holder()
    if holder is None or holder.pid == os.getpid():
        return False
    try:
        os.kill(holder.pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _first_line(exc: BaseException) -> str:
    return (str(exc) or type(exc).__name__).splitlines()[0][:200]
