"""The watchdog's loop body: sample, decide, and act on sparkdeck's own engine.

A plain class with everything injected (the reading source, the stop action, the clock), so
the same code runs in `sparkdeck launch`, `sparkdeck guard`, the TUI's worker, the tests
(with replayed readings) and the stop-latency benchmark. The stop action is meant to be a
sparkdeck.guard.stopper.ContainerStopper for the engine's container: Docker first, a direct
SIGKILL of the container's own processes when Docker does not answer, and never anything
sparkdeck did not start.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sparkdeck.guard import records
from sparkdeck.guard.policy import OK, STOP, WARN, Decision, WatchdogPolicy
from sparkdeck.guard.readings import Reading
from sparkdeck.guard.stopper import StopAttempt
from sparkdeck.host.ticks import until_next_tick

if TYPE_CHECKING:
    from sparkdeck.config.settings import GuardSettings
    from sparkdeck.runtime.client import DockerRuntime
    from sparkdeck.runtime.state import EngineState

WINDOW_S = 60.0  # readings kept, and written with every action
RETRY_S = 0.5  # a pending stop is tried again at least this often
# Inside the warn band the next reading comes at least this often, whatever the configured
# rate: memory that is already short can reach the stop threshold within one 1 Hz period
# (a model loading, a KV cache growing), and up to a whole period is otherwise lost before
# the crossing is even seen. Reading /proc costs ~0.1 ms, so the faster rate is free.
WARN_HZ = 4.0


class Watchdog:
    """Guards one engine. `step()` takes one reading; `run()` repeats it at a given rate.

    Once the policy says stop, the stop is carried through whatever the later readings say:
    the decision is written first (a stalled disk or daemon must not cost the record), then
    the stop action is called on every step until it reports the container gone. The stop
    action may return None (done) or a StopAttempt (sparkdeck.guard.stopper); one that
    raises is a failed attempt, retried on the next step. The loop keeps deciding meanwhile.

    `resume` is a stop of the same container that an earlier watchdog decided and did not
    see confirmed (sparkdeck.guard.records.pending_stop): its host ended first (a launch's
    start-up guard at ready, a window, a CLI, a service that died). The first step carries
    it through whatever the reading says by then: memory that came back for a moment does
    not make a stop decision void.
    """

    def __init__(
        self,
        policy: WatchdogPolicy,
        read: Callable[[], Reading],
        stop: Callable[[], StopAttempt | None],
        *,
        engine: str,
        on_decision: Callable[[Decision], object] | None = None,
        on_attempt: Callable[[StopAttempt], object] | None = None,
        on_error: Callable[[Exception], object] | None = None,
        record: Callable[..., Path | None] = records.write_action,
        clock: Callable[[], float] = time.monotonic,
        window_s: float = WINDOW_S,
        container_id: str = "",
        resume: dict[str, Any] | None = None,
    ):
        self.policy = policy
        self.container_id = container_id  # in every record: a later watchdog finds its stop
        self.resume = resume
        self.read = read
        self.stop = stop
        self.engine = engine
        self.on_decision: Callable[[Decision], object] = on_decision or (lambda d: None)
        self.on_attempt: Callable[[StopAttempt], object] = on_attempt or (lambda a: None)
        self.on_error = on_error  # None: a failed reading ends run() with its error
        self.record = record
        self.clock = clock
        self.window_s = window_s
        self.window: deque[Reading] = deque()
        self.stopping: Decision | None = None  # the stop decision being carried out
        self.stopped_by: Decision | None = None  # set once the stop is confirmed
        self.stopped_at: float | None = None  # clock() when the stop was confirmed
        self.attempts: list[StopAttempt] = []
        self.records: list[Path] = []
        self.stop_record: Path | None = None  # the stop's decision, written before it acted
        self._last: Decision | None = None
        self._warned_at: float | None = None
        self.interval_s = 0.0  # the configured period (run() sets it): the stall rule's step

    @property
    def stop_pending(self) -> bool:
        return self.stopping is not None and self.stopped_by is None

    def step(self) -> Decision:
        reading = self.read()
        self.window.append(reading)
        while self.window and reading.t - self.window[0].t > self.window_s:
            self.window.popleft()
        decision = self.policy.decide(self.window, self.interval_s)
        before = self._last
        self._last = decision
        if decision.level == STOP and self.stopping is None:
            self.stopping = decision
            # first: the record survives a hung stop
            self.stop_record = self._write("stopping", decision)
        elif (
            self.resume is not None and self.stopping is None and self.policy.guard.mode == "stop"
        ):  # warn-only since: the user's word now
            self.stopping, self.stop_record = self._resumed(decision, self.resume)
        elif decision.stop_conditions_met and not (before and before.stop_conditions_met):
            self._write("would stop", decision)  # warn-only mode
        elif (
            decision.level == WARN
            and (before is None or before.level == OK)
            and (self._warned_at is None or reading.t - self._warned_at > self.window_s)
        ):
            self._warned_at = reading.t  # one warning record per window, not one per flicker
            self._write("warned", decision)
        # The stop before anything is shown: every moment counts once the host is this short.
        attempt = self._attempt_stop() if self.stop_pending else None
        self.on_decision(decision)
        if attempt is not None:
            self.on_attempt(attempt)
        return decision

    @staticmethod
    def _resumed(decision: Decision, earlier: dict[str, Any]) -> tuple[Decision, Path | None]:
        """The earlier stop as this watchdog's own decision (its record is already written,
        or held in memory by sparkdeck.guard.records)."""
        said = earlier.get("decision")
        reasons = said.get("reasons") if isinstance(said, dict) else None
        why = "; ".join(str(r) for r in reasons or ()) or "an earlier decision"
        record = Path(str(earlier.get("file", "")))
        return (
            replace(
                decision,
                level=STOP,
                reasons=(f"carrying through a stop decided earlier and not confirmed ({why})",),
            ),
            record if record.is_file() else None,
        )

    def _attempt_stop(self) -> StopAttempt:
        stopping = self.stopping
        assert stopping is not None
        try:
            attempt = self.stop() or StopAttempt(True, "stopped", 0, self.clock())
        except Exception as exc:  # noqa: BLE001 - any failure is one failed attempt: retried next step
            attempt = StopAttempt(
                False, f"stop failed: {str(exc) or type(exc).__name__}; retrying", 0, self.clock()
            )
        seen = {a.text for a in self.attempts}
        self.attempts.append(attempt)
        if attempt.done:
            self.stopped_by, self.stopped_at = stopping, attempt.at or self.clock()
            self._write("stopped", stopping, attempt.text)
        elif attempt.killed or attempt.text not in seen:
            # one record per new turn of events, not one per retry (a daemon that stays
            # stopped for minutes would otherwise leave a file every few seconds)
            self._write(
                "killed directly" if attempt.killed else "stop failed", stopping, attempt.text
            )
        return attempt

    def _write(self, action: str, decision: Decision, note: str | None = None) -> Path | None:
        try:
            extra: dict[str, Any] = {"note": note} if note is not None else {}
            if self.container_id:
                extra["container_id"] = self.container_id
            path = self.record(action, self.engine, decision, tuple(self.window), **extra)
        except Exception as exc:  # noqa: BLE001 - a full disk must not keep the engine from being stopped
            # (sparkdeck.guard.records holds the record in memory and writes it later)
            if self.on_error is not None:
                self.on_error(exc)
            return getattr(exc, "path", None)  # a held record: where it will be written
        if path is not None:
            self.records.append(path)
        return path

    def run(self, until: threading.Event, hz: Callable[[], float]) -> Decision | None:
        """Sample at `hz()` per second until `until` is set or the engine was stopped.

        Inside the warn band it samples at least at WARN_HZ, and a pending stop is retried
        at least every RETRY_S. Errors of a step go to `on_error`
        and the loop goes on; without `on_error`, a failed reading ends the loop with its
        error, unless a stop is pending (then it is kept up whatever the readings do).
        """
        decision = None
        while not until.is_set() and self.stopped_by is None:
            began, tried = time.monotonic(), len(self.attempts)  # ticks are real time
            self.interval_s = 1.0 / hz()
            try:
                decision = self.step()
            except Exception as exc:
                if self.on_error is not None:
                    self.on_error(exc)
                elif not self.stop_pending:
                    raise
                if self.stop_pending and len(self.attempts) == tried:  # no reading, still act
                    try:
                        self.on_attempt(self._attempt_stop())
                    except Exception as shown:  # noqa: BLE001 - only showing it failed: keep going
                        if self.on_error is not None:
                            self.on_error(shown)
            period = self.interval_s
            if decision is not None and decision.level == WARN:
                period = min(period, 1.0 / WARN_HZ)
            if self.stop_pending:
                period = min(period, RETRY_S)
            # on the machine's shared ticks (host.ticks): the service's telemetry and this
            # decision reach a window together, drawn in one frame
            until.wait(until_next_tick(period, began))
        return decision


def engine_watchdog(
    guard: GuardSettings,
    runtime: DockerRuntime | None,
    engine: EngineState | None,
    *,
    label: str = "",
    read: Callable[[], Reading] | None = None,
    on_decision: Callable[[Decision], object] | None = None,
    on_attempt: Callable[[StopAttempt], object] | None = None,
    on_error: Callable[[Exception], object] | None = None,
) -> Watchdog:
    """The one way sparkdeck builds a watchdog (the launch, the TUI, `sparkdeck guard`, the
    benchmark): the policy from settings.toml [guard], the host's readings (or `read`), a
    stop of this container that an earlier watchdog left unconfirmed, and
    for an engine sparkdeck started the guard's one stop action, a ContainerStopper (Docker
    first, the container's own processes killed directly when Docker does not answer). With
    no engine of sparkdeck's (`engine` or `runtime` None: an attached server) it still
    decides, under `label`, and stops nothing: sparkdeck never stops what it did not start.
    """
    from sparkdeck.guard.readings import HostReadings
    from sparkdeck.guard.stopper import ContainerStopper

    stop: Callable[[], StopAttempt | None] = lambda: None  # noqa: E731 (nothing of ours)
    container_id, resume = "", None
    if runtime is not None and engine is not None:
        stop = ContainerStopper.for_engine(runtime, engine.container_id)
        # a stop an earlier watchdog of this container decided and never saw confirmed
        container_id, resume = engine.container_id, records.pending_stop(engine.container_id)
    return Watchdog(
        WatchdogPolicy(guard),
        read or HostReadings(),
        stop,
        engine=engine.name if engine is not None else label,
        on_decision=on_decision,
        on_attempt=on_attempt,
        on_error=on_error,
        container_id=container_id,
        resume=resume,
    )
