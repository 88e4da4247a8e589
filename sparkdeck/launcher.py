"""Launching a preset, one engine at a time: pull, check the fit, stop the running engine and
wait for its memory, flush, start, and guard the start-up until ready.

The order matters on a Spark. The image is pulled first, while the old engine still serves,
so a failed pull changes nothing. The fit check comes before anything is stopped, so a launch
refused for memory leaves the old engine serving. Then the old engine is stopped and its
memory allowed to come back (the safe switch), the page cache is dropped, and the new
container starts under the watchdog at the start-up rate. A launch that fails at any step
leaves no container of its own behind.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Collection
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sparkdeck import paths
from sparkdeck.docker_errors import DockerRuntimeError, EngineExited, ReadinessTimeout
from sparkdeck.docker_runtime import DockerRuntime
from sparkdeck.engine_state import EngineState
from sparkdeck.engines import KINDS
from sparkdeck.guard import records
from sparkdeck.guard.claims import GIB
from sparkdeck.guard.fit import FitCheck, check_fit
from sparkdeck.guard.policy import Decision, WatchdogPolicy
from sparkdeck.guard.readings import HostReadings, Reading
from sparkdeck.guard.startup import StartupGuard
from sparkdeck.guard.switch import SwitchProgress, SwitchWaiter
from sparkdeck.guard.timeline import StartupTimeline, TimelineRecorder, mark_phases
from sparkdeck.guard.watchdog import Watchdog
from sparkdeck.host.meminfo import MemorySnapshot, read_meminfo
from sparkdeck.host.nvml import NvmlReader, gpu_process_pids
from sparkdeck.pull_progress import PullProgress
from sparkdeck.host.pagecache import FlushReport, flush_page_cache
from sparkdeck.presets import Preset
from sparkdeck.settings import GuardSettings

# ----- events a launch reports (facts, in the past tense) ---------------------------------


@dataclass(frozen=True)
class PullStarted:
    image: str


@dataclass(frozen=True)
class ModelPullStarted:
    """The engine is up but lacks the preset's model: it is being pulled (Ollama)."""

    model: str


@dataclass(frozen=True)
class FitChecked:
    fit: FitCheck
    forced: bool


@dataclass(frozen=True)
class PreviousStopping:
    engine: EngineState


@dataclass(frozen=True)
class PreviousStopped:
    engine: EngineState
    seconds: float


@dataclass(frozen=True)
class SwitchWaited:
    """One step of the wait for a stopped engine's memory (the last one has `done`)."""

    engine: str  # its preset id (or container name)
    progress: SwitchProgress


@dataclass(frozen=True)
class CacheFlushed:
    report: FlushReport


@dataclass(frozen=True)
class FlushSkipped:
    reason: str


@dataclass(frozen=True)
class ContainerStarted:
    engine: EngineState


@dataclass(frozen=True)
class GuardDecided:
    """The start-up watchdog's decision on one reading."""

    decision: Decision


@dataclass(frozen=True)
class GuardFailed:
    """The start-up watchdog could not read the host: the start-up is not guarded."""

    error: str


@dataclass(frozen=True)
class TimelineSaved:
    timeline: StartupTimeline
    path: Path


@dataclass(frozen=True)
class EngineReady:
    engine: EngineState
    seconds: float


LaunchEvent = (PullStarted | ModelPullStarted | PullProgress | FitChecked | PreviousStopping
               | PreviousStopped | SwitchWaited | CacheFlushed | FlushSkipped | ContainerStarted
               | GuardDecided | GuardFailed | TimelineSaved | EngineReady)


class DoesNotFit(Exception):
    """The preset's claim does not fit in memory; `fit` carries the numbers."""

    def __init__(self, preset_id: str, fit: FitCheck):
        super().__init__(f"{preset_id} {fit.verdict}; not launched (the running engine, if "
                         "any, keeps running). Pass --force to launch anyway.\n  "
                         + "\n  ".join(fit.lines()))
        self.fit = fit


class GuardStoppedEngine(Exception):
    """The watchdog stopped the engine during its start-up, before the host ran out."""

    def __init__(self, preset_id: str, decision: Decision, record: Path | None):
        where = f"; readings saved in {record}" if record else ""
        super().__init__(f"the memory guard stopped {preset_id} while it started: "
                         f"{'; '.join(decision.reasons)}{where}")
        self.decision = decision
        self.record = record


def nvml_pids() -> set[int] | None:
    """GPU process PIDs from NVML, or None where NVML cannot tell (no driver here)."""
    with NvmlReader() as reader:
        return gpu_process_pids(reader.read())


class Launcher:
    """Runs the launch and stop sequences; reports progress through `on_event`.

    The readers (memory, guard readings, GPU processes) are injected so tests can drive the
    real Docker daemon with a reading source that crosses a threshold on cue.
    """

    def __init__(self, runtime: DockerRuntime,
                 on_event: Callable[[Any], None] | None = None,
                 flush: Callable[[], FlushReport] = flush_page_cache,
                 stop_grace: float = 30.0, guard: GuardSettings | None = None,
                 read_memory: Callable[[], MemorySnapshot] = read_meminfo,
                 readings: Callable[[], Reading] | None = None,
                 gpu_pids: Callable[[], Collection[int] | None] = nvml_pids):
        self.runtime = runtime
        self.on_event = on_event or (lambda event: None)
        self.flush = flush
        self.stop_grace = stop_grace
        self.guard = guard or GuardSettings()
        self.read_memory = read_memory
        self.readings = readings or HostReadings(read_memory)
        self.gpu_pids = gpu_pids

    def check_fit(self, preset: Preset, flush_possible: bool = True) -> FitCheck:
        """Will `preset` fit once the running engine is stopped? Reads memory now."""
        memory = self.read_memory()
        claim = preset.engine.memory_claim(preset, memory.total, self.guard)
        returning = 0
        for engine in self.runtime.engines():
            record = records.load_launch_record(engine.name) if engine.alive else None
            if record and isinstance(record.get("available_before"), int):
                returning += max(record["available_before"] - memory.available, 0)
        for pending in self._still_returning():
            returning += max(pending.available_before - memory.available, 0)
        return check_fit(claim, memory, headroom=int(self.guard.stop_available_pct / 100
                                                     * memory.total),
                         returning=returning, flush_possible=flush_possible)

    def stop_all(self, wait_memory: bool = False,
                 skip_wait: threading.Event | None = None) -> list[EngineState]:
        """Stop and remove every container of this scope (running or crashed); with
        `wait_memory`, then wait for each one's memory to come back (the safe switch)."""
        stopped = []
        for engine in self.runtime.engines():
            self.on_event(PreviousStopping(engine))
            pids = self.runtime.host_pids(engine.container_id) if engine.alive else set()
            started = time.monotonic()
            self.runtime.stop(engine.container_id, grace=self.stop_grace)
            self.on_event(PreviousStopped(engine, time.monotonic() - started))
            stopped.append(engine)
            record = records.load_launch_record(engine.name)
            if not (engine.alive and record and "available_before" in record):
                continue
            label = engine.preset_id or engine.name
            if wait_memory:
                self._wait_for(label, int(record["available_before"]), pids,
                               self.guard.switch_timeout_s, skip_wait)
            else:  # the next launch waits for it (see wait_for_returning)
                records.save_returning(engine.name, label, int(record["available_before"]),
                                       sorted(pids))
        return stopped

    def _still_returning(self) -> list[records.Returning]:
        """Returning records of stops recent enough that their memory may still come back;
        older ones are dropped (after the switch timeout a wait would end at once)."""
        pending = []
        for returning in records.load_returning():
            if time.time() - returning.stopped_at < self.guard.switch_timeout_s:
                pending.append(returning)
            else:
                records.clear_returning(returning.container_name)
        return pending

    def wait_for_returning(self, skip: threading.Event | None = None) -> None:
        """Wait for the memory of engines stopped earlier without a wait (`sparkdeck stop`,
        then a launch seconds later), each until the switch timeout counted from its stop."""
        for pending in self._still_returning():
            left = self.guard.switch_timeout_s - (time.time() - pending.stopped_at)
            self._wait_for(pending.label, pending.available_before, pending.pids,
                           max(left, 0.0), skip)
            records.clear_returning(pending.container_name)

    def _wait_for(self, label: str, baseline: int, pids: Collection[int], timeout: float,
                  skip: threading.Event | None) -> SwitchProgress:
        return SwitchWaiter(lambda: self.read_memory().available, self.gpu_pids).wait(
            baseline=baseline, margin=int(self.guard.switch_margin_gib * GIB),
            timeout=timeout, old_pids=pids, skip=skip,
            on_progress=lambda p: self.on_event(SwitchWaited(label, p)))

    def launch(self, preset: Preset, *, flush: bool = True, timeout: float | None = None,
               cancel: threading.Event | None = None, force: bool = False,
               skip_switch_wait: threading.Event | None = None) -> EngineState:
        spec = preset.container_spec()
        if not self.runtime.image_present(spec.image):
            self.on_event(PullStarted(spec.image))
            self.runtime.pull(spec.image, on_progress=self.on_event)
        fit = self.check_fit(preset, flush_possible=flush)
        self.on_event(FitChecked(fit, forced=force and not fit.allowed))
        if not fit.allowed and not force:
            raise DoesNotFit(preset.id, fit)
        self.stop_all(wait_memory=True, skip_wait=skip_switch_wait)
        self.wait_for_returning(skip_switch_wait)
        if flush:
            self.on_event(CacheFlushed(self.flush()))
        else:
            self.on_event(FlushSkipped("--no-flush"))
        before = self.read_memory()
        started, started_wall = time.monotonic(), time.time()
        engine = self.runtime.start(spec)
        self.on_event(ContainerStarted(engine))
        record = {"preset_id": preset.id, "container_id": engine.container_id,
                  "available_before": before.available, "total": before.total,
                  "fit": fit.to_dict()}
        records.save_launch_record(engine.name, record)
        recorder = TimelineRecorder(started)
        watchdog = Watchdog(WatchdogPolicy(self.guard), self.readings,
                            lambda: self.runtime.stop(engine.container_id, grace=0),
                            engine=engine.name,
                            on_decision=lambda d: self.on_event(GuardDecided(d)))
        try:
            with StartupGuard(watchdog, recorder, self.guard.startup_hz,
                              on_error=lambda e: self.on_event(GuardFailed(str(e)))):
                ready = self.runtime.wait_ready(engine, timeout or spec.startup_timeout,
                                                cancel=cancel)
                self._fetch_model(preset, ready, cancel)
        except EngineExited as exc:
            self._save_timeline(engine, record, recorder, started_wall)
            if watchdog.stopped_by is not None:
                error = GuardStoppedEngine(preset.id, watchdog.stopped_by,
                                           watchdog.records[0] if watchdog.records else None)
                record_failure(preset.id, str(error), None, [])
                raise error from None
            record_failure(preset.id, str(exc), exc.exit_code, exc.log_tail)
            self.runtime.stop(engine.container_id, grace=0)
            raise
        except BaseException as exc:
            self._save_timeline(engine, record, recorder, started_wall)
            tail = exc.log_tail if isinstance(exc, ReadinessTimeout) else []
            record_failure(preset.id, str(exc) or type(exc).__name__, None, tail)
            self.runtime.stop(engine.container_id, grace=self.stop_grace)
            raise
        clear_failure()
        self._save_timeline(engine, record, recorder, started_wall)
        self.on_event(EngineReady(ready, time.monotonic() - started))
        return ready

    def _fetch_model(self, preset: Preset, ready: EngineState,
                     cancel: threading.Event | None) -> None:
        """What the server still has to fetch before it can serve the preset (Ollama pulls
        its model), still under the start-up watchdog: a pull also fills memory."""
        model = preset.engine.missing_model(ready.base_url, preset)
        if model is not None:
            self.on_event(ModelPullStarted(model))
            preset.engine.pull_model(ready.base_url, model, self.on_event, cancel)

    def _save_timeline(self, engine: EngineState, record: dict[str, Any],
                       recorder: TimelineRecorder, started_wall: float) -> None:
        """Mark phases from the container's timed log lines and save with the record."""
        try:
            lines = [(when - started_wall, text)
                     for when, text in self.runtime.timed_logs(engine.container_id)]
        except DockerRuntimeError:  # gone (the guard stopped it): keep the memory points
            lines = []
        timeline = recorder.timeline(mark_phases(lines, preset_phases(engine)))
        path = records.save_launch_record(engine.name, {**record,
                                                        "timeline": timeline.to_dict()})
        self.on_event(TimelineSaved(timeline, path))


def preset_phases(engine: EngineState) -> tuple[tuple[str, str], ...]:
    kind = KINDS.get(engine.kind)
    return kind.startup_phases if kind else ()


# ----- the last failed launch, kept so `status` can still show it after cleanup ------------

def _failure_path() -> Path:
    return paths.data_dir() / "last-launch-failure.json"


def record_failure(preset_id: str, message: str, exit_code: int | None,
                   log_tail: list[str]) -> None:
    paths.atomic_write_text(_failure_path(), json.dumps({
        "preset_id": preset_id, "message": message, "exit_code": exit_code,
        "log_tail": log_tail, "at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    }, indent=2))


def last_failure() -> dict[str, Any] | None:
    try:
        return json.loads(_failure_path().read_text())
    except (OSError, ValueError):
        return None


def clear_failure() -> None:
    try:
        _failure_path().unlink()
    except FileNotFoundError:
        pass
