"""The wait between SIGTERM and SIGKILL, said while it runs.

An engine that ignores SIGTERM (or takes long to exit) makes a stop last its whole grace
period: 30 s of silence read as a hang. Every front end says the same thing from here: how
long ago SIGTERM went, how long until SIGKILL, and at the end which of the two ended it.
The CLI prints it from a ticking thread; the engine card renders it from the stop's
deadline at each tick of its own.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable

DEFAULT_GRACE_S = 30.0  # `sparkdeck stop`'s default and the service's (LaunchFlow)


def grace_text(grace: float, elapsed: float) -> str:
    """Where the stop is, `elapsed` seconds after SIGTERM with `grace` seconds allowed."""
    left = max(0, math.ceil(grace - elapsed))
    if left == 0:
        return f"SIGTERM sent {grace:g} s ago: SIGKILL now"
    return f"SIGTERM sent {max(0, int(elapsed))} s ago; SIGKILL in {left} s unless it exits first"


def start_text(name: str, grace: float) -> str:
    return (
        f"stopping {name}: SIGTERM sent; it has {grace:g} s to exit, then Docker kills it (SIGKILL)"
    )


def end_text(name: str, grace: float, seconds: float) -> str:
    """How the stop ended: the engine exited by itself, or the grace ran out (SIGKILL).
    Docker sends SIGKILL exactly at the end of the grace, so the time tells which."""
    if seconds >= grace - 0.25:
        return (
            f"{name} did not exit within {grace:g} s of SIGTERM: Docker killed it "
            f"(SIGKILL) after {seconds:.1f} s"
        )
    return f"{name} exited {seconds:.1f} s after SIGTERM"


class Countdown:
    """Calls `emit(grace_text(...))` every `every` seconds from a thread of its own until
    `stop()`: for a front end whose stop call blocks for the whole grace."""

    def __init__(
        self,
        grace: float,
        emit: Callable[[str], None],
        every: float = 1.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.grace, self._emit, self._every, self._clock = grace, emit, every, clock
        self._done = threading.Event()
        self._started = clock()
        self._thread = threading.Thread(target=self._run, name="stop countdown", daemon=True)

    def __enter__(self) -> Countdown:
        self._started = self._clock()
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def elapsed(self) -> float:
        return self._clock() - self._started

    def stop(self) -> None:
        self._done.set()
        if self._thread.is_alive():
            self._thread.join(timeout=2.0)

    def _run(self) -> None:
        while not self._done.wait(self._every):
            if self.elapsed <= self.grace + self._every:  # past SIGKILL: the end line says it
                self._emit(grace_text(self.grace, self.elapsed))
