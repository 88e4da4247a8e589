"""Launching a preset, one engine at a time: pull, stop the running engine, flush, start, wait.

The order matters on a Spark. The image is pulled first, while the old engine still serves,
so a failed pull changes nothing. Then the old engine is stopped (its memory must come back
before another engine claims it), the page cache is dropped, and the new container starts.
A launch that fails at any step leaves no container of its own behind.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sparkdeck import paths
from sparkdeck.docker_errors import EngineExited, ReadinessTimeout
from sparkdeck.docker_runtime import DockerRuntime, EngineState
from sparkdeck.pull_progress import PullProgress
from sparkdeck.host.pagecache import FlushReport, flush_page_cache
from sparkdeck.presets import Preset

# ----- events a launch reports (facts, in the past tense) ---------------------------------


@dataclass(frozen=True)
class PullStarted:
    image: str


@dataclass(frozen=True)
class PreviousStopping:
    engine: EngineState


@dataclass(frozen=True)
class PreviousStopped:
    engine: EngineState
    seconds: float


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
class EngineReady:
    engine: EngineState
    seconds: float


LaunchEvent = (PullStarted | PullProgress | PreviousStopping | PreviousStopped | CacheFlushed
               | FlushSkipped | ContainerStarted | EngineReady)


class Launcher:
    """Runs the launch and stop sequences; reports progress through `on_event`."""

    def __init__(self, runtime: DockerRuntime,
                 on_event: Callable[[Any], None] | None = None,
                 flush: Callable[[], FlushReport] = flush_page_cache,
                 stop_grace: float = 30.0):
        self.runtime = runtime
        self.on_event = on_event or (lambda event: None)
        self.flush = flush
        self.stop_grace = stop_grace

    def stop_all(self) -> list[EngineState]:
        """Stop and remove every container of this scope (running or crashed)."""
        stopped = []
        for engine in self.runtime.engines():
            self.on_event(PreviousStopping(engine))
            started = time.monotonic()
            self.runtime.stop(engine.container_id, grace=self.stop_grace)
            self.on_event(PreviousStopped(engine, time.monotonic() - started))
            stopped.append(engine)
        return stopped

    def launch(self, preset: Preset, *, flush: bool = True, timeout: float | None = None,
               cancel: threading.Event | None = None) -> EngineState:
        spec = preset.container_spec()
        if not self.runtime.image_present(spec.image):
            self.on_event(PullStarted(spec.image))
            self.runtime.pull(spec.image, on_progress=self.on_event)
        self.stop_all()
        if flush:
            self.on_event(CacheFlushed(self.flush()))
        else:
            self.on_event(FlushSkipped("--no-flush"))
        started = time.monotonic()
        engine = self.runtime.start(spec)
        self.on_event(ContainerStarted(engine))
        try:
            ready = self.runtime.wait_ready(engine, timeout or spec.startup_timeout,
                                            cancel=cancel)
        except EngineExited as exc:
            record_failure(preset.id, str(exc), exc.exit_code, exc.log_tail)
            self.runtime.stop(engine.container_id, grace=0)
            raise
        except BaseException as exc:
            tail = exc.log_tail if isinstance(exc, ReadinessTimeout) else []
            record_failure(preset.id, str(exc) or type(exc).__name__, None, tail)
            self.runtime.stop(engine.container_id, grace=self.stop_grace)
            raise
        clear_failure()
        self.on_event(EngineReady(ready, time.monotonic() - started))
        return ready


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
