"""Launch events as the lines a person reads: `sparkdeck launch` prints them, and the
service sends the same lines to its clients (sparkdeck.service.owner)."""

from __future__ import annotations

from typing import Protocol

from sparkdeck.launch.events import (
    GuardDecided,
    LaunchEvent,
    ModelPullStarted,
    PullStarted,
    SwitchWaited,
)
from sparkdeck.launch.listener import LaunchListener
from sparkdeck.runtime.pull import PullProgress, PullTracker

__all__ = ["LaunchPrinter"]


class TextOut(Protocol):
    """What the printer writes to: a terminal, a pipe, or the service's line sink."""

    def write(self, s: str, /) -> int: ...

    def flush(self) -> None: ...

    def isatty(self) -> bool: ...


class LaunchPrinter(LaunchListener):
    """Prints launch events as they come (each its own `describe()`); pull progress as one
    updating line on a terminal, and the steps that repeat (the switch wait, the guard's
    readings) only when they change."""

    def __init__(self, out: TextOut):
        self.out = out
        self.tty = out.isatty()
        self.tracker = PullTracker()
        self._last_step = -1
        self._switch_at = -1
        self._guard_level = "ok"
        self._bar_open = False  # a terminal's pull line is waiting for its newline

    def __call__(self, event: LaunchEvent) -> None:
        event.deliver(self)

    def _print(self, line: str) -> None:
        # after a terminal's updating pull line, the next line starts on a line of its own
        prefix, self._bar_open = ("\n" if self._bar_open else ""), False
        print(prefix + line, file=self.out, flush=True)

    def other(self, event: LaunchEvent) -> None:
        self._print(event.describe())

    def pull_started(self, event: PullStarted) -> None:
        self.tracker.reset()
        self._print(event.describe())

    def model_pull_started(self, event: ModelPullStarted) -> None:
        self._print(event.describe())
        self.tracker.reset()
        self._last_step = -1

    def pull_progress(self, event: PullProgress) -> None:
        self.tracker.update(event)
        fraction = self.tracker.fraction
        if fraction is None:
            return
        text = f"pulling {event.image}: {fraction:4.0%} ({self.tracker.layers_done} layers done)"
        if self.tty:
            print("\r" + text, end="", file=self.out, flush=True)
            self._bar_open = True
        elif int(fraction * 10) != self._last_step:  # a line per 10 % in logs and pipes
            self._last_step = int(fraction * 10)
            self._print(text)

    def switch_waited(self, event: SwitchWaited) -> None:
        last, self._switch_at = self._switch_at, int(event.progress.elapsed // 5)
        if event.progress.done or last != self._switch_at:  # a line every 5 s
            self._print(event.describe())

    def guard_decided(self, event: GuardDecided) -> None:
        level, self._guard_level = self._guard_level, event.decision.level
        if level != event.decision.level:
            self._print(event.describe())
