"""The one launch and stop flow, for the CLI and the TUI alike: plan, confirm, run.

A plan is read first (what will be stopped, whether the page cache is flushed and why not,
the memory setting, the fit verdict with its numbers) and shown to the user: the CLI prints
its lines and asks (or takes --yes), the TUI shows them in a dialog. Only a confirmed plan
runs. The fit is checked once, here, before anything is pulled or stopped; `run` hands that
verdict to the sequence, which checks again only when the plan has gone stale (older than
PLAN_FRESH_S, or the engines running are no longer the ones planned for). Front ends call
`plan`, `run` and `stop` and render the events (sparkdeck.launch.events).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from sparkdeck.config.settings import GuardSettings
from sparkdeck.host.pagecache import HOW_TO_ALLOW, can_flush
from sparkdeck.launch.events import BeforeStop, EventSink
from sparkdeck.presets import Preset

if TYPE_CHECKING:  # the docker SDK loads with the first plan, not with the UI
    from sparkdeck.guard.fit import FitCheck
    from sparkdeck.launch.model_step import ModelSurvey
    from sparkdeck.launch.sequence import Launcher
    from sparkdeck.runtime.client import DockerRuntime
    from sparkdeck.runtime.state import EngineState

PLAN_FRESH_S = 60.0
"""A plan's fit verdict is used as it is for this long after it was read; a launch run later
(a confirmation left open) reads memory again."""


def flush_policy(flush: bool | None) -> tuple[bool, str | None]:
    """The one page-cache policy: None flushes when this process may (root, or sudo -n) and
    otherwise keeps the cache and says how to allow it; False keeps it (--no-flush, or a
    test on a shared machine); True flushes (and the flush fails loudly if it may not)."""
    if flush is None:
        return (True, None) if can_flush() else (False, HOW_TO_ALLOW)
    return flush, None if flush else "flush turned off"


@dataclass(frozen=True)
class LaunchPlan:
    """A launch as the confirmation shows it, before anything is touched."""

    preset: Preset
    stopping: tuple[EngineState, ...]  # sparkdeck's engines the launch stops first
    claim: str  # what the new engine asks of unified memory (preset.memory_setting())
    flush: bool
    flush_note: str | None = None  # why the page cache will not be flushed
    fit: FitCheck | None = None  # the memory guard's verdict, read when the plan was made
    fit_error: str | None = None  # why there is no verdict
    model: ModelSurvey | None = None  # the Hub model to download first, if any
    made_at: float = field(default_factory=time.monotonic)

    @property
    def is_switch(self) -> bool:
        return any(engine.alive for engine in self.stopping)

    def fresh(self, engines: tuple[EngineState, ...], now: float | None = None) -> bool:
        """Does the fit verdict still hold: recent enough, and the same engines running?"""
        now = time.monotonic() if now is None else now
        running = {(e.container_id, e.alive) for e in engines}
        return now - self.made_at <= PLAN_FRESH_S and running == {
            (e.container_id, e.alive) for e in self.stopping
        }

    def lines(self) -> list[str]:
        """The confirmation's sentences, in the order things will happen."""
        out = []
        for engine in self.stopping:
            verb = "stop" if engine.alive else "remove"
            out.append(
                f"{verb} {engine.preset_id or engine.name} ({engine.image}, {engine.docker_state})"
            )
        if not self.stopping:
            out.append("no engine is running: nothing will be stopped")
        out.append(
            "flush the page cache"
            if self.flush
            else f"keep the page cache ({self.flush_note or 'flush turned off'})"
        )
        if self.model is not None:
            out.append(self.model.line())  # "will download N GiB of model first"
        out.append(f"launch {self.preset.id}: {self.preset.image}")
        # the engine's own knob (e.g. "-c 2048 -ngl 0") is a setting, not an amount: the
        # amount it claims is the guard's figure in GiB, on its own line
        out.append(f"memory setting: {self.claim}")
        if self.fit is not None:
            out.append(f"memory it will claim: {self.fit.claim.describe()}")
            out.append(f"fit: {self.fit.verdict}: {self.fit.reason}")
        elif self.fit_error:
            out.append(f"fit not checked: {self.fit_error}")
        return out


@dataclass(frozen=True)
class StopPlan:
    """A stop as the confirmation shows it."""

    stopping: tuple[EngineState, ...]

    def lines(self) -> list[str]:
        if not self.stopping:
            return [
                "no sparkdeck engine is running (engines sparkdeck did not start are "
                "never stopped by it)"
            ]
        return [
            f"stop and remove {e.preset_id or e.name} ({e.image}, {e.docker_state})"
            for e in self.stopping
        ]


class LaunchFlow:
    """Plans and runs launches and stops against the Docker runtime `runtime()` returns.

    `runtime` is called for every plan and run (the app passes EngineReader.runtime, which
    connects once and again after a loss). `flush` None means "flush when this process may"
    (root or sudo -n); tests pass False where dropping the machine's page cache is not wanted.
    `guard` holds the thresholds of settings.toml that the fit check and watchdog apply.
    """

    def __init__(
        self,
        runtime: Callable[[], DockerRuntime],
        flush: bool | None = None,
        stop_grace: float = 30.0,
        guard: GuardSettings | None = None,
        before_stop: BeforeStop | None = None,
    ) -> None:
        self._connect = runtime
        self._flush = flush
        self._stop_grace = stop_grace
        self._guard = guard or GuardSettings()
        self._before_stop = before_stop  # the service's wait for the endpoint's replies

    def plan(self, preset: Preset) -> LaunchPlan:
        engines = tuple(self._connect().engines())
        flush, note = flush_policy(self._flush)
        fit, fit_error = None, None
        try:
            fit = self._launcher(lambda event: None).check_fit(preset, flush_possible=flush)
        except (OSError, ValueError) as exc:  # /proc unreadable, a record that is not JSON
            fit_error = str(exc)
        from sparkdeck.launch.model_step import survey

        return LaunchPlan(
            preset,
            engines,
            preset.memory_setting(),
            flush,
            note,
            fit,
            fit_error,
            model=survey(preset),
        )  # asks the Hub: plans are made in workers

    def plan_stop(self) -> StopPlan:
        return StopPlan(tuple(self._connect().engines()))

    def _launcher(self, on_event: EventSink) -> Launcher:
        from sparkdeck.launch.sequence import Launcher

        return Launcher(
            self._connect(),
            on_event=on_event,
            stop_grace=self._stop_grace,
            guard=self._guard,
            before_stop=self._before_stop,
        )

    def run(
        self,
        plan: LaunchPlan,
        on_event: EventSink,
        cancel: threading.Event | None = None,
        *,
        force: bool = False,
        skip_switch_wait: threading.Event | None = None,
        timeout: float | None = None,
    ) -> EngineState:
        """Launch as planned. `force` launches a preset the guard says does not fit (the user
        chose "Launch anyway"); setting `skip_switch_wait` ends the wait for the stopped
        engine's memory at once. Takes the launch lock: LockBusy names a launch or stop
        another process (the CLI, another TUI) has in progress. The plan's fit verdict is
        used unless the plan has gone stale."""
        launcher = self._launcher(on_event)
        fit = (
            plan.fit
            if plan.fit is not None and plan.fresh(tuple(launcher.runtime.engines()))
            else None
        )
        return launcher.launch(
            plan.preset,
            flush=plan.flush,
            cancel=cancel,
            force=force,
            skip_switch_wait=skip_switch_wait,
            timeout=timeout,
            fit=fit,
            flush_note=plan.flush_note,
        )

    def stop(self, on_event: EventSink, grace: float | None = None) -> list[EngineState]:
        """Stop sparkdeck's engines under the launch lock (LockBusy while another process
        launches or stops: the CLI and the TUI never act on the engine at the same time);
        `grace` overrides this flow's stop grace."""
        launcher = self._launcher(on_event)
        if grace is not None:
            launcher.stop_grace = grace
        return launcher.stop_engines()
