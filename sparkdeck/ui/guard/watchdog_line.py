"""The status line at the bottom: the running watchdog of the engine sparkdeck started.

The app binds the engine to guard into `engine` (every sparkdeck engine whose container is
alive, except the one a running launch still guards with its own start-up watchdog; see
`guarded`) and whether a launch runs into `launching`. The line owns the thread worker
that follows the engine's guard through EngineControl (sparkdeck.service.control: the
service's watchdog, or this window's own while the service is off or does not answer) and
renders each guard event (sparkdeck.service.guard_events) with one `match`; decisions of a
launch's start-up watchdog reach it from the app (GuardDecisionMade). When the guard stops
the engine it says so here, notifies, and posts EngineStopped up for the engine card.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING, Any

from textual.message import Message
from textual.reactive import var
from textual.worker import Worker

from sparkdeck.config.settings import GuardSettings
from sparkdeck.service.guard_events import (
    Decided,
    GuardedHere,
    GuardEvent,
    GuardNote,
    GuardStopped,
    ReadFailed,
    ServiceDecided,
    ServiceGuards,
    StopTried,
    TakenOver,
)
from sparkdeck.ui.machine.live import LiveText
from sparkdeck.ui.messages import GuardDecisionMade, report_worker_failure
from sparkdeck.ui.readers import EngineReading

if TYPE_CHECKING:
    from sparkdeck.guard.policy import Decision
    from sparkdeck.guard.stopper import StopAttempt
    from sparkdeck.guard.watchdog import Watchdog
    from sparkdeck.runtime.client import DockerRuntime
    from sparkdeck.runtime.state import EngineState
    from sparkdeck.service.liveness import Liveness
    from sparkdeck.ui.service_feed import ServiceFeed


def guarded(engine: EngineState | None, launch_guards: str | None) -> EngineState | None:
    """The engine the running watchdog must follow: `engine` when its container is alive,
    whatever its health (starting, unhealthy, hung, slow to answer), unless it is the
    container `launch_guards` (a running launch's own start-up watchdog covers it)."""
    if engine is None or not engine.alive or engine.container_id == launch_guards:
        return None
    return engine


def follow_engine(
    docker: object, busy: bool, launch_guards: str | None
) -> tuple[bool, EngineState | None]:
    """Whether telemetry samples fast (a launch or stop runs, or the engine starts) and the
    engine the running watchdog follows, from Docker's latest word (an EngineReading, or a
    failure: then no engine is known)."""
    reading = docker if isinstance(docker, EngineReading) else None
    engine = reading.engine if reading is not None else None
    fast = busy or (reading is not None and reading.status == "starting")
    return fast, guarded(engine, launch_guards)


class WatchdogLine(LiveText):
    """One line: the guard's level and the numbers it decided on; while a stop is carried
    out, what the stop has done so far (it may take several attempts on a hung Docker).
    A decision a second repaints the line only when its words changed, and never asks for
    a layout pass: the line is one row whatever it says (LiveText)."""

    @dataclass
    class Guarded(Message, bubble=False):
        """The engine's guard told something (`event`). A decision that is not a stop is
        replaced by a newer one of the same guard; anything else is a turn of events and
        never replaced unseen."""

        event: GuardEvent

        def can_replace(self, message: Message) -> bool:
            return (
                isinstance(message, WatchdogLine.Guarded)
                and type(message.event) is type(self.event)
                and _a_decision_not_a_stop(message.event)
            )

    @dataclass
    class EngineStopped(Message):
        """The running watchdog decided to stop the engine, for `reasons` (told once)."""

        reasons: str

    engine: var[EngineState | None] = var(None, always_update=True, init=False)
    launching: var[bool] = var(False)  # a launch or stop runs (it reports its own)

    def __init__(
        self,
        guard: Callable[[], GuardSettings] = GuardSettings,
        runtime: Callable[[], DockerRuntime] | None = None,
        feed: ServiceFeed | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__("memory guard: not running", markup=False, **kwargs)
        self._guard = guard  # read at each wait: settings may change while it runs
        self._runtime = runtime  # None: a line that only shows what it is given
        # the window's stream of the service's events: the guard's are relayed from it
        self._feed = feed
        self.level = "off"
        self._off_text = ""
        self._stop: str | None = None  # the latest stop attempt's text, once a stop began
        self._stopped = False
        self.watched: str | None = None  # the container the loop guards
        self._watchdog: Watchdog | None = None  # this window's own (guards when told)
        self._done: threading.Event | None = None
        self._stop_told = self._stop_failure_told = False
        self._stop_reasons = ""
        # the service's guard decided a stop it has not said is done: the relay goes on
        self._service_stopping = False
        self._bound = False
        self._takeover: str | None = None  # why this window guards (the service is silent)

    def watch_engine(self, engine: EngineState | None) -> None:
        if not self._bound:  # the binding's first value is the app's start, not a reading
            self._bound = True
            return
        self.follow(engine)

    def follow(self, engine: EngineState | None) -> None:
        """Guard `engine` at guard.running_hz, or stop guarding (None).

        The same container keeps its watchdog, unless that loop ended without stopping it
        (then a new one starts): a stop in progress is never abandoned. Nor is it when the
        engine is seen gone (None: its processes were killed, Docker has not removed it yet):
        the loop carries its stop through to the container's removal, as the service's does
        (service.guarding), and the line says when it is done."""
        container = engine.container_id if engine is not None else None
        if engine is None:
            self.off(
                "the launch's own watchdog guards the engine it starts"
                if self.launching
                else "not running (no sparkdeck engine is running)"
            )
        if container == self.watched and (container is None or self._alive()):
            return
        if container is None and (self._carrying_out_a_stop() or self._service_stopping):
            # its word that the stop is done may come after Docker's that the container went
            # (CI run 37: the card never said why); _stop_ended follows the engine then
            return
        self.watched = container
        self.stop_watching()
        self._watchdog = None
        if engine is None or self._runtime is None:
            return
        done = self._done = threading.Event()
        self._stop_told = self._stop_failure_told = self._service_stopping = False
        self.reset(f"watching {engine.preset_id or engine.name}…")
        self.run_worker(
            partial(self._follow_guard, engine, self._runtime(), self._guard(), done),
            thread=True,
            name="memory watchdog",
            group="guard",
            exclusive=True,
            exit_on_error=False,
            description=f"guard {engine.name}'s memory",
        )

    def _follow_guard(
        self,
        engine: EngineState,
        runtime: DockerRuntime,
        guard: GuardSettings,
        done: threading.Event,
    ) -> None:
        """The worker: EngineControl's guard of `engine` until `done` (made here, off the
        event loop: following the service loads its client)."""
        from sparkdeck.service.control import guard_control

        control = guard_control()
        try:
            following = control.guard(
                engine,
                runtime,
                guard,
                self._posted,
                done,
                lambda: self._guard().running_hz,
                stream=self._feed,
            )
            if self._done is done:  # still the followed engine's (_alive: None reads as alive)
                self._watchdog = following.watchdog
            following.run()
        finally:
            control.close()

    def _posted(self, event: GuardEvent) -> None:
        """Each guard event as a message, in the order they came (from the worker). This
        window's own decisions go as GuardDecisionMade, the message a launch's start-up
        watchdog's decisions come in too: the app (and its tests) see every watchdog's
        decisions alike. Posted here, not re-posted by the handler: a stop attempt must not
        overtake the decision it carries out."""
        if isinstance(event, Decided):
            self.post_message(GuardDecisionMade(event.decision))
        else:
            self.post_message(self.Guarded(event))

    def on_watchdog_line_guarded(self, message: Guarded) -> None:
        message.stop()
        match message.event:
            case Decided(decision):  # (this window's come as GuardDecisionMade: _posted)
                self.decided(decision)
            case ServiceDecided() as remote:
                self._service_decided(remote)
            case StopTried(attempt):
                self._stop_attempted(attempt)
                if attempt.done:
                    self._stop_ended()
            case ReadFailed(error):
                self.note(f"cannot read the host ({error}); trying again")
            case GuardStopped(reasons):
                self.post_message(self.EngineStopped(reasons))
                self._stop_ended()
            case ServiceGuards(text=text) | GuardNote(text=text):
                self.note(text)
            case TakenOver(life):
                self._taken_over(life)
                self._stop_ended()  # no word of it will come: Docker's stands, as before
            case GuardedHere():
                self._takeover = None

    def _taken_over(self, life: Liveness) -> None:
        """The service does not answer (or is gone): this window's watchdog guards now."""
        self._takeover = (
            f"the sparkdeck service is {life.state} ({life.detail}): the "
            "engine is not guarded by it, THIS WINDOW guards it"
        )
        if self._stop is None:
            self.level = "warn"
            self.set_class(False, "-ok", "-stop")
            self.set_class(True, "-warn")
            self.set_text(f"memory guard: {self._takeover}")
        self.notify(self._takeover, title="memory guard", severity="warning", markup=False)

    def _service_decided(self, decision: ServiceDecided) -> None:
        self._takeover = None  # the service answers again: it guards, this window relays
        if decision.level == "stop" and decision.reasons:  # what the stop's toast says why
            self._stop_reasons = "; ".join(decision.reasons)
            self._service_stopping = True
            if not self._stop_told:  # the card says why at once, as for this window's stop
                self._stop_told = True
                self.post_message(self.EngineStopped(self._stop_reasons))
        if self._stop is None:
            self.level = decision.level
            for level in ("ok", "warn", "stop"):
                self.set_class(decision.level == level, f"-{level}")
            self.set_text("memory guard (service) " + decision.text)

    def _stop_ended(self) -> None:
        """The service's stop is done (or the service does not answer): an engine seen gone
        meanwhile is followed now."""
        if self._service_stopping:
            self._service_stopping = False
            if self.engine is None and self.watched is not None:
                self.follow(None)

    def _alive(self) -> bool:
        """Does the loop for the watched container still run (or has it stopped it)?"""
        watchdog = self._watchdog
        if watchdog is None or watchdog.stopped_by is not None:
            return True
        return any(w.group == "guard" and not w.is_finished for w in self.workers)

    def _carrying_out_a_stop(self) -> bool:
        """Has this window's watchdog decided a stop that Docker has not confirmed yet?"""
        watchdog = self._watchdog
        return watchdog is not None and watchdog.stop_pending and self._alive()

    def stop_watching(self) -> None:
        """End the running loop at its next wait (a new engine, or the app's end)."""
        if self._done is not None:
            self._done.set()
            self._done = None

    def on_unmount(self) -> None:
        self.stop_watching()

    def on_guard_decision_made(self, message: GuardDecisionMade) -> None:
        message.stop()
        self.decided(message.decision)

    def decided(self, decision: Decision) -> None:
        """A watchdog decided: this line's own, or a launch's start-up one (via the app)."""
        self.show(decision)
        if decision.level != "stop" or self._stop_told:
            return
        self._stop_told = True  # a stop is carried through over many decisions: told once
        self._stop_reasons = "; ".join(decision.reasons)
        self.post_message(self.EngineStopped(self._stop_reasons))

    def _stop_attempted(self, attempt: StopAttempt) -> None:
        self.show_attempt(attempt.text, attempt.done)
        if self.launching:  # a stop during a launch is reported as the launch's failure
            return
        if attempt.done:
            self.notify(
                f"the memory guard stopped the engine: {self._stop_reasons} ({attempt.text})",
                title="memory guard",
                severity="error",
                markup=False,
            )
        elif attempt.killed or not self._stop_failure_told:
            self._stop_failure_told = True
            self.notify(
                attempt.text,
                title="memory guard: the stop is not done yet",
                severity="error",
                markup=False,
            )

    def on_worker_state_changed(self, event: Worker.StateChanged) -> None:
        report_worker_failure(self.app, event)  # StateChanged does not bubble

    # ----- what the line says -----------------------------------------------------------

    def off(self, why: str) -> None:
        """No watchdog runs (no engine, or a launch's own start-up guard has taken over);
        a stop it made stays on the line until the next decision."""
        text = f"memory guard: {why}"
        if self.level != "stop" and (self.level != "off" or text != self._off_text):
            self.level, self._off_text = "off", text  # unchanged text: no repaint each poll
            self.set_class(False, "-ok", "-warn")
            self.set_text(text)

    def reset(self, why: str) -> None:
        """A new engine is followed: what the line said about the last one's stop goes."""
        self.level, self._stop, self._stopped = "off", None, False
        self.set_class(False, "-ok", "-warn", "-stop")
        self.off(why)

    def note(self, text: str) -> None:
        """Something the watchdog could not do (it keeps trying)."""
        self.set_text(f"memory guard: {text}")

    def show_attempt(self, text: str, done: bool) -> None:
        self._stop, self._stopped = text, done
        self.level = "stop"
        self.set_class(False, "-ok", "-warn")
        self.set_class(True, "-stop")
        self.set_text(
            (
                "memory guard STOPPED the engine: "
                if done
                else "memory guard is STOPPING the engine: "
            )
            + text
        )

    def show(self, decision: Decision) -> None:
        if self._stop is not None:  # the stop's progress stays in front of the numbers
            self.set_text(
                (
                    "memory guard STOPPED the engine: "
                    if self._stopped
                    else "memory guard is STOPPING the engine: "
                )
                + self._stop
                + f" | now {decision.describe()}"
            )
            return
        self.level = decision.level
        takeover = self._takeover is not None and decision.level == "ok"
        for level in ("ok", "warn", "stop"):  # taken over: the warning colour, even at OK
            self.set_class(level == ("warn" if takeover else decision.level), f"-{level}")
        prefix = (
            "memory guard is STOPPING the engine: " if decision.level == "stop" else "memory guard "
        )
        if self._takeover is not None:
            prefix += "(this window; the service does not answer) "
        self.set_text(prefix + decision.describe())


def _a_decision_not_a_stop(event: GuardEvent) -> bool:
    match event:
        case Decided(decision):
            return decision.level != "stop"
        case ServiceDecided(level=level):
            return level != "stop"
    return False
