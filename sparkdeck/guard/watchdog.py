"""The watchdog's loop body: sample, decide, and act on sparkdeck's own engine.

A plain class with everything injected (the reading source, the stop action, the clock), so
the same code runs in `sparkdeck launch`, `sparkdeck guard`, the TUI's worker, the tests
(with replayed readings) and the stop-latency benchmark. The stop action is meant to be
DockerRuntime.stop on the engine's container, which refuses anything sparkdeck did not start.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from pathlib import Path

from sparkdeck.guard import records
from sparkdeck.guard.policy import OK, STOP, WARN, Decision, WatchdogPolicy
from sparkdeck.guard.readings import Reading

WINDOW_S = 60.0  # readings kept, and written with every action


class Watchdog:
    """Guards one engine. `step()` takes one reading; `run()` repeats it at a given rate."""

    def __init__(self, policy: WatchdogPolicy, read: Callable[[], Reading],
                 stop: Callable[[], None], *, engine: str,
                 on_decision: Callable[[Decision], None] | None = None,
                 record: Callable[[str, str, Decision, Sequence[Reading]], Path | None]
                 = records.write_action,
                 clock: Callable[[], float] = time.monotonic, window_s: float = WINDOW_S):
        self.policy = policy
        self.read = read
        self.stop = stop
        self.engine = engine
        self.on_decision = on_decision or (lambda d: None)
        self.record = record
        self.clock = clock
        self.window_s = window_s
        self.window: deque[Reading] = deque()
        self.stopped_by: Decision | None = None
        self.stopped_at: float | None = None  # clock() when the stop action returned
        self.records: list[Path] = []
        self._last: Decision | None = None
        self._warned_at: float | None = None

    def step(self) -> Decision:
        reading = self.read()
        self.window.append(reading)
        while self.window and reading.t - self.window[0].t > self.window_s:
            self.window.popleft()
        decision = self.policy.decide(self.window)
        before = self._last
        self._last = decision
        if decision.level == STOP and self.stopped_by is None:
            self.stop()  # first: every moment counts once the host is this short
            self.stopped_by, self.stopped_at = decision, self.clock()
            self._write("stopped", decision)
        elif decision.stop_conditions_met and not (before and before.stop_conditions_met):
            self._write("would stop", decision)  # warn-only mode
        elif decision.level == WARN and (before is None or before.level == OK) and (
                self._warned_at is None or reading.t - self._warned_at > self.window_s):
            self._warned_at = reading.t  # one warning record per window, not one per flicker
            self._write("warned", decision)
        self.on_decision(decision)
        return decision

    def _write(self, action: str, decision: Decision) -> None:
        path = self.record(action, self.engine, decision, tuple(self.window))
        if path is not None:
            self.records.append(path)

    def run(self, until: threading.Event, hz: Callable[[], float]) -> Decision | None:
        """Sample at `hz()` per second until `until` is set or the engine was stopped."""
        decision = None
        while not until.is_set() and self.stopped_by is None:
            began = self.clock()
            decision = self.step()
            until.wait(max(0.0, 1.0 / hz() - (self.clock() - began)))
        return decision
