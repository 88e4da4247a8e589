"""Running a launch, one engine at a time: check the fit, pull, stop the running engine and
wait for its memory, flush, start, and guard the start-up until ready.

Front ends reach this through sparkdeck.launch.plan (plan, confirm, run). The order matters
on a Spark. One launch or stop runs at a time across processes (a flock in the data dir).
Everything checkable is checked while the old engine still serves (preset, GPU runtime, host
port, memory fit, then the image pull: sparkdeck.launch.preflight), so a refusal changes
nothing. Then the old engine is stopped and its memory allowed to come back (the safe
switch), the page cache is dropped, and the new container starts under the watchdog at the
start-up rate. A failure after the stop is recorded until dismissed (launch.failure); a
launch that fails leaves no container of its own behind, and Ctrl-C says what is left.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Collection
from typing import Any

from sparkdeck.config.settings import GuardSettings
from sparkdeck.engines import startup_phases
from sparkdeck.guard import own_memory, records
from sparkdeck.guard.fit import FitCheck, check_fit
from sparkdeck.guard.readings import HostReadings, Reading
from sparkdeck.guard.startup import StartupGuard
from sparkdeck.guard.switch import SwitchProgress
from sparkdeck.guard.timeline import TimelineRecorder, mark_phases
from sparkdeck.guard.watchdog import engine_watchdog
from sparkdeck.host.meminfo import MemorySnapshot, read_meminfo
from sparkdeck.host.nvml import nvml_pids
from sparkdeck.host.pagecache import FlushReport, flush_page_cache
from sparkdeck.launch import model_step, preflight
from sparkdeck.launch.events import (
    BeforeStop,
    CacheFlushed,
    CleanupHurried,
    CleanupStopping,
    ContainerStarted,
    EngineReady,
    EventSink,
    FitChecked,
    FlushSkipped,
    GuardDecided,
    GuardFailed,
    ModelPullStarted,
    PreviousStopped,
    PreviousStopping,
    PullStarted,
    TimelineSaved,
)
from sparkdeck.launch.failure import (
    DoesNotFit,
    GuardStoppedEngine,
    LaunchInterrupted,
    after_interrupt,
    clear_failure,
    record_failure,
)
from sparkdeck.launch.lock_holder import LaunchLock
from sparkdeck.launch.returning import coming_back, still_returning, wait_for_memory
from sparkdeck.presets import Preset
from sparkdeck.runtime.client import DockerRuntime
from sparkdeck.runtime.errors import DockerRuntimeError, EngineExited, ReadinessTimeout
from sparkdeck.runtime.spec import ContainerSpec
from sparkdeck.runtime.state import EngineState


class Launcher:
    """Runs the launch and stop sequences; reports progress through `on_event`.

    The readers (memory, guard readings, GPU processes) are injected so tests can drive the
    real Docker daemon with a reading source that crosses a threshold on cue.
    """

    def __init__(
        self,
        runtime: DockerRuntime,
        on_event: EventSink | None = None,
        flush: Callable[[], FlushReport] = flush_page_cache,
        stop_grace: float = 30.0,
        guard: GuardSettings | None = None,
        read_memory: Callable[[], MemorySnapshot] = read_meminfo,
        readings: Callable[[], Reading] | None = None,
        gpu_pids: Callable[[], Collection[int] | None] = nvml_pids,
        engine_memory: own_memory.ReadEngineMemory = own_memory.default_engine_memory,
        before_stop: BeforeStop | None = None,
    ):
        self.runtime = runtime
        self.before_stop = before_stop
        self.engine_memory = engine_memory  # what an engine holds itself (pids -> bytes)
        self.on_event = on_event or (lambda event: None)
        self.flush = flush
        self.stop_grace = stop_grace
        self.guard = guard or GuardSettings()
        self.read_memory = read_memory
        self.readings = readings or HostReadings(read_memory)
        self.gpu_pids = gpu_pids
        self._lock = LaunchLock()  # re-entrant within this launcher (a launch's stop)
        self._touched = False  # this launch has begun to stop or start containers
        self._started: EngineState | None = None  # the container this launch started

    def check_fit(self, preset: Preset, flush_possible: bool = True) -> FitCheck:
        """Will `preset` fit once the running engine is stopped? Reads memory now.

        "Coming back" counts only what the engines themselves hold: a running engine's own
        memory measured now (its cgroup, RSS, NVML per-process), and for one stopped earlier
        what of its holding has not shown up yet. Never a MemAvailable delta, which would
        count any other process's memory as the engine's."""
        memory = self.read_memory()
        claim = preset.engine.memory_claim(preset, memory.total, self.guard)
        measured = [
            self._measure(engine, memory.available)
            for engine in self.runtime.engines()
            if engine.alive
        ]
        returning, sources = coming_back(measured, memory.available, self.guard.switch_timeout_s)
        return check_fit(
            claim,
            memory,
            headroom=int(self.guard.stop_available_pct / 100 * memory.total),
            returning=returning,
            flush_possible=flush_possible,
            returning_from=tuple(sources),
        )

    def _measure(self, engine: EngineState, available: int) -> own_memory.Measured:
        return own_memory.measure(engine, self.runtime.host_pids, self.engine_memory, available)

    def stop_all(
        self, wait_memory: bool = False, skip_wait: threading.Event | None = None
    ) -> list[EngineState]:
        """Stop and remove every container of this scope (running or crashed); with
        `wait_memory`, then wait for each one's memory to come back (the safe switch).

        What each live engine holds is measured just before its stop: that amount is what
        the wait waits for (or what the returning record keeps for the next launch)."""
        stopped = []
        engines = self.runtime.engines()
        # records of containers that are gone go now (run under the launch lock or by a
        # plain stop: nothing is adopted here, what is alive is stopped next anyway)
        records.settle_launch_records(engines, launch_in_progress=True)
        for engine in engines:
            self.on_event(PreviousStopping(engine, self.stop_grace, time.time()))
            measured = self._measure(engine, self.read_memory().available)
            started = time.monotonic()
            self.runtime.stop(engine.container_id, grace=self.stop_grace)
            self.on_event(PreviousStopped(engine, time.monotonic() - started))
            stopped.append(engine)
            records.drop_launch_record(engine.container_id)  # its container is gone
            if not engine.alive:
                continue  # an exited container holds nothing
            if wait_memory:
                self._wait_for(measured.returning(), self.guard.switch_timeout_s, skip_wait)
            else:  # the next launch waits for it (see wait_for_returning)
                records.save_returning(measured.returning())
        return stopped

    def wait_for_returning(self, skip: threading.Event | None = None) -> None:
        """Wait for the memory of engines stopped earlier without a wait (`sparkdeck stop`,
        then a launch seconds later), each until the switch timeout counted from its stop."""
        for pending in still_returning(self.guard.switch_timeout_s):
            left = self.guard.switch_timeout_s - (time.time() - pending.stopped_at)
            self._wait_for(pending, max(left, 0.0), skip)
            records.clear_returning(pending.container_id)

    def _wait_for(
        self, returning: records.Returning, timeout: float, skip: threading.Event | None
    ) -> SwitchProgress:
        return wait_for_memory(
            returning,
            timeout,
            skip,
            read_memory=self.read_memory,
            gpu_pids=self.gpu_pids,
            margin_gib=self.guard.switch_margin_gib,
            on_event=self.on_event,
        )

    def stop_engines(self) -> list[EngineState]:
        """`sparkdeck stop` and the TUI's stop: stop_all under the launch lock, so a stop
        never lands in the middle of another process's launch."""
        with self._lock.held("a stop"):
            return self.stop_all()

    def launch(
        self,
        preset: Preset,
        *,
        flush: bool = True,
        timeout: float | None = None,
        cancel: threading.Event | None = None,
        force: bool = False,
        skip_switch_wait: threading.Event | None = None,
        fit: FitCheck | None = None,
        flush_note: str | None = None,
    ) -> EngineState:
        """Launch `preset` under the launch lock (LockBusy when another launch runs).

        Everything checkable is checked before the running engine is touched. A failure
        after that is recorded (last_failure) until dismissed or a launch succeeds. Ctrl-C
        ends in LaunchInterrupted, whose message says what Docker has left running. `fit`
        is a verdict read moments ago (a fresh LaunchPlan's): it is not read again.
        `flush_note` says why the page cache is kept when `flush` is False.
        """
        with self._lock.held(f"a launch of {preset.id}"):
            self._touched, self._started = False, None
            try:
                return self._launch(
                    preset,
                    flush=flush,
                    timeout=timeout,
                    cancel=cancel,
                    force=force,
                    skip_switch_wait=skip_switch_wait,
                    fit=fit,
                    flush_note=flush_note,
                )
            except KeyboardInterrupt:
                truth = after_interrupt(self.runtime, preset.id, self._started, self._touched)
                if self._touched:
                    record_failure(preset.id, truth, None, [])
                raise LaunchInterrupted(truth) from None

    def _preflight(
        self,
        preset: Preset,
        flush: bool,
        force: bool,
        fit: FitCheck | None,
        cancel: threading.Event | None = None,
    ) -> tuple[ContainerSpec, FitCheck]:
        """Every check that needs nothing stopped: the spec, the GPU runtime, the memory fit
        (before the pull: a 20 GB pull for a preset that cannot fit is wasted time), the
        host port, and the image (pulled while the old engine still serves)."""
        spec = preflight.container_spec(preset)
        preflight.check_gpu(spec, self.runtime.runtimes(), self.runtime.local_daemon)
        freed: set[int] = set()  # ports of our engines, which the switch stops first
        for engine in self.runtime.engines():
            if engine.alive:
                freed |= self.runtime.published_ports(engine.container_id)
        preflight.check_port(spec, freed)
        if fit is None:
            fit = self.check_fit(preset, flush_possible=flush)
        self.on_event(FitChecked(fit, forced=force and not fit.allowed))
        if not fit.allowed and not force:
            raise DoesNotFit(preset.id, fit)
        # a missing Hub model is downloaded now, under our events, not by the starting engine
        spec = model_step.ensure_model(preset, spec, self.on_event, cancel)
        if not self.runtime.image_present(spec.image):
            self.on_event(PullStarted(spec.image))
            self.runtime.pull(spec.image, on_progress=self.on_event)
            preflight.check_port(spec, freed)  # a pull can take minutes: look again
        preflight.check_limits(self.runtime.lifecycle, spec, self.runtime.scope)  # memlock first
        return spec, fit

    def _launch(
        self,
        preset: Preset,
        *,
        flush: bool,
        timeout: float | None,
        cancel: threading.Event | None,
        force: bool,
        skip_switch_wait: threading.Event | None,
        fit: FitCheck | None,
        flush_note: str | None,
    ) -> EngineState:
        spec, fit = self._preflight(preset, flush, force, fit, cancel)
        _honour(cancel)
        if self.before_stop is not None:  # nothing is stopped or started yet: a cancel
            self.before_stop(self.on_event, cancel, skip_switch_wait)  # here leaves all as is
            _honour(cancel)
        self._touched = True
        stopped: list[EngineState] = []
        try:
            stopped = self.stop_all(wait_memory=True, skip_wait=skip_switch_wait)
            _honour(cancel)  # a stop can take its whole grace period: asked meanwhile?
            self.wait_for_returning(skip_switch_wait)
            if flush:
                self.on_event(CacheFlushed(self.flush()))
            else:
                self.on_event(FlushSkipped(flush_note or "--no-flush"))
            _honour(cancel)  # the last moment before anything new is created
            before = self.read_memory()
            started, started_wall = time.monotonic(), time.time()
            engine = self.runtime.start(spec)
        except Exception as exc:  # after the stop: say so until the user dismisses it
            gone = ", ".join(e.preset_id or e.name for e in stopped if e.alive)
            where = f"{gone} was stopped, then " if gone else ""
            record_failure(preset.id, f"{where}{preset.id} failed to start: {exc}", None, [])
            raise
        self._started = engine
        self.on_event(ContainerStarted(engine))
        record = {
            "preset_id": preset.id,
            "container_id": engine.container_id,
            "available_before": before.available,
            "total": before.total,
            "fit": fit.to_dict(),
        }
        # keyed by the container's id: the name is reused by the next launch of this preset
        records.save_launch_record(engine.container_id, engine.name, record)
        recorder = TimelineRecorder(started)
        # The stop retries, and kills the container's processes directly when Docker does
        # not answer (sparkdeck.guard.stopper); the decision is recorded before it acts.
        watchdog = engine_watchdog(
            self.guard,
            self.runtime,
            engine,
            read=self.readings,
            on_decision=lambda d: self.on_event(GuardDecided(d)),
        )
        try:
            with StartupGuard(
                watchdog,
                recorder,
                self.guard.startup_hz,
                on_error=lambda e: self.on_event(GuardFailed(str(e))),
            ):
                ready = self.runtime.wait_ready(
                    engine, timeout or spec.startup_timeout, cancel=cancel
                )
                self._fetch_model(preset, ready, cancel)
        except EngineExited as exc:
            self._save_timeline(engine, record, recorder, started_wall)
            if watchdog.stopping is not None:  # killed directly: Docker may not know yet
                error = GuardStoppedEngine(preset.id, watchdog.stopping, watchdog.stop_record)
                record_failure(preset.id, str(error), None, [])
                raise error from None
            record_failure(preset.id, str(exc), exc.exit_code, exc.log_tail)
            self.runtime.stop(engine.container_id, grace=0)
            raise
        except BaseException as exc:
            try:  # the stop comes whatever happens here (a second Ctrl-C included)
                self._save_timeline(engine, record, recorder, started_wall)
                tail = exc.log_tail if isinstance(exc, ReadinessTimeout) else []
                record_failure(preset.id, str(exc) or type(exc).__name__, None, tail)
            finally:
                self._stop_started(engine)
            raise
        clear_failure()
        self._save_timeline(engine, record, recorder, started_wall)
        self.on_event(EngineReady(ready, time.monotonic() - started))
        return ready

    def _stop_started(self, engine: EngineState) -> None:
        """Stop the container this launch started, gracefully; a Ctrl-C during the grace
        kills it at once instead of leaving it running with no watchdog."""
        self.on_event(CleanupStopping(engine, self.stop_grace))
        try:
            self.runtime.stop(engine.container_id, grace=self.stop_grace)
        except KeyboardInterrupt:
            self.on_event(CleanupHurried(engine))
            self.runtime.stop(engine.container_id, grace=0)
            raise

    def _fetch_model(
        self, preset: Preset, ready: EngineState, cancel: threading.Event | None
    ) -> None:
        """What the server still has to fetch before it can serve the preset (Ollama pulls
        its model), still under the start-up watchdog: a pull also fills memory."""
        model = preset.engine.missing_model(ready.base_url, preset)
        if model is not None:
            self.on_event(ModelPullStarted(model))
            preset.engine.pull_model(ready.base_url, model, self.on_event, cancel)

    def _save_timeline(
        self,
        engine: EngineState,
        record: dict[str, Any],
        recorder: TimelineRecorder,
        started_wall: float,
    ) -> None:
        """Mark phases from the container's timed log lines and save with the record."""
        try:
            lines = [
                (when - started_wall, text)
                for when, text in self.runtime.timed_logs(engine.container_id)
            ]
        except DockerRuntimeError:  # gone (the guard stopped it): keep the memory points
            lines = []
        timeline = recorder.timeline(mark_phases(lines, startup_phases(engine.kind)))
        path = records.save_launch_record(
            engine.container_id, engine.name, {**record, "timeline": timeline.to_dict()}
        )
        self.on_event(TimelineSaved(timeline, path))


def _honour(cancel: threading.Event | None) -> None:
    """A cancel asked from another thread (the service's client pressed Ctrl-C) ends the
    launch between steps exactly as a Ctrl-C in this thread does: no container is created
    after it, and LaunchInterrupted says what Docker has left running."""
    if cancel is not None and cancel.is_set():
        raise KeyboardInterrupt
