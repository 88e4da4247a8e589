"""The launch and stop flow the TUI runs: plan (what will be stopped, what is claimed), then act.

A plan is read first and shown to the user for confirmation; only a confirmed plan runs.
This is the one place where a fit check against unified memory and a wait for memory to come
back after a stop belong (the memory guard adds them to `plan` and `run`); the UI only calls
`plan`, `run` and `stop` from its workers and renders the events.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from sparkdeck.host.pagecache import HOW_TO_ALLOW, can_flush
from sparkdeck.presets import Preset
from sparkdeck.settings import GuardSettings

if TYPE_CHECKING:  # the docker SDK loads with the first plan, not with the UI
    from sparkdeck.docker_runtime import DockerRuntime
    from sparkdeck.engine_state import EngineState
    from sparkdeck.guard.fit import FitCheck
    from sparkdeck.launcher import Launcher

EventSink = Callable[[Any], None]


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

    @property
    def is_switch(self) -> bool:
        return any(engine.alive for engine in self.stopping)

    def lines(self) -> list[str]:
        """The confirmation's sentences, in the order things will happen."""
        out = []
        for engine in self.stopping:
            verb = "stop" if engine.alive else "remove"
            out.append(f"{verb} {engine.preset_id or engine.name} ({engine.image}, "
                       f"{engine.docker_state})")
        if not self.stopping:
            out.append("no engine is running: nothing will be stopped")
        out.append("flush the page cache" if self.flush
                   else f"keep the page cache ({self.flush_note or 'flush turned off'})")
        out.append(f"launch {self.preset.id}: {self.preset.image}")
        out.append(f"memory it will claim: {self.claim}")
        if self.fit is not None:
            out.append(f"the guard sizes it at {self.fit.claim.describe()}")
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
            return ["no sparkdeck engine is running (engines sparkdeck did not start are "
                    "never stopped by it)"]
        return [f"stop and remove {e.preset_id or e.name} ({e.image}, {e.docker_state})"
                for e in self.stopping]


class LaunchFlow:
    """Plans and runs launches and stops against the Docker runtime `runtime()` returns.

    `runtime` is called for every plan and run (the app passes EngineReader.runtime, which
    connects once and again after a loss). `flush` None means "flush when this process may"
    (root or sudo -n); tests pass False where dropping the machine's page cache is not wanted.
    `guard` holds the thresholds of settings.toml that the fit check and watchdog apply.
    """

    def __init__(self, runtime: Callable[[], DockerRuntime],
                 flush: bool | None = None, stop_grace: float = 30.0,
                 guard: GuardSettings | None = None) -> None:
        self._connect = runtime
        self._flush = flush
        self._stop_grace = stop_grace
        self._guard = guard or GuardSettings()

    def plan(self, preset: Preset) -> LaunchPlan:
        engines = tuple(self._connect().engines())
        if self._flush is None:
            flush = can_flush()
            note = None if flush else HOW_TO_ALLOW
        else:
            flush, note = self._flush, None if self._flush else "flush turned off"
        fit, fit_error = None, None
        try:
            fit = self._launcher(lambda event: None).check_fit(preset, flush_possible=flush)
        except (OSError, ValueError) as exc:  # /proc unreadable, a record that is not JSON
            fit_error = str(exc)
        return LaunchPlan(preset, engines, preset.memory_setting(), flush, note, fit, fit_error)

    def plan_stop(self) -> StopPlan:
        return StopPlan(tuple(self._connect().engines()))

    def _launcher(self, on_event: EventSink) -> Launcher:
        from sparkdeck.launcher import Launcher

        return Launcher(self._connect(), on_event=on_event, stop_grace=self._stop_grace,
                        guard=self._guard)

    def run(self, plan: LaunchPlan, on_event: EventSink,
            cancel: threading.Event | None = None, *, force: bool = False,
            skip_switch_wait: threading.Event | None = None) -> EngineState:
        """Launch as planned. `force` launches a preset the guard says does not fit (the user
        chose "Launch anyway"); setting `skip_switch_wait` ends the wait for the stopped
        engine's memory at once."""
        return self._launcher(on_event).launch(plan.preset, flush=plan.flush, cancel=cancel,
                                               force=force, skip_switch_wait=skip_switch_wait)

    def stop(self, on_event: EventSink) -> list[EngineState]:
        return self._launcher(on_event).stop_all()
