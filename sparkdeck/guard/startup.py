"""Guarding a start-up: the watchdog at the start-up rate plus the memory timeline.

Engines are most dangerous while they start (weights stream in, the KV cache is carved out,
CUDA graphs are captured), so from the moment the container starts until it is ready the
watchdog samples at `startup_hz` in a thread of its own, and every reading also goes into the
start-up timeline. Used as a context manager around the readiness wait.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from types import TracebackType

from sparkdeck.guard.readings import Reading
from sparkdeck.guard.timeline import TimelineRecorder
from sparkdeck.guard.watchdog import Watchdog


class StartupGuard:
    """Runs `watchdog` in a thread at `hz` until the block ends; feeds `recorder`."""

    def __init__(
        self,
        watchdog: Watchdog,
        recorder: TimelineRecorder,
        hz: float,
        on_error: Callable[[Exception], object] | None = None,
    ):
        self.watchdog = watchdog
        self.recorder = recorder
        self.hz = hz
        self.on_error = on_error or (lambda exc: None)
        self.error: Exception | None = None
        self._done = threading.Event()
        self._thread = threading.Thread(
            target=self._run, name="sparkdeck-startup-guard", daemon=True
        )
        read = watchdog.read

        def read_and_record() -> Reading:
            reading = read()
            recorder.add(reading)
            return reading

        watchdog.read = read_and_record

    def _run(self) -> None:
        try:
            self.watchdog.run(self._done, lambda: self.hz)
        except Exception as exc:  # noqa: BLE001 - a reader broke: say so, never die silently
            self.error = exc
            self.on_error(exc)

    def __enter__(self) -> StartupGuard:
        self._thread.start()
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        # A stop it began (the processes killed directly, Docker not done yet) is carried
        # through by its thread, which ends once Docker confirms the container gone: waited
        # for here a while, then left to finish on its own.
        if not self.watchdog.stop_pending:
            self._done.set()
        self._thread.join(timeout=10)
