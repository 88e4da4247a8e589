"""Blocking reads the UI runs in thread workers, returning frozen values it can render.

Nothing here imports Textual: each reader is a plain function or class that a worker calls
and that tests can call directly. Machine telemetry (memory, PSI, GPU) is read by
sparkdeck.telemetry.sampler.TelemetrySampler; this module holds the preset and engine reads.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from sparkdeck.config.settings import GuardSettings
from sparkdeck.runtime.errors import DockerUnavailable

if TYPE_CHECKING:  # the docker SDK and the preset files' reader load after the first frame
    from sparkdeck.catalog import PresetCatalog
    from sparkdeck.endpoints import Endpoint
    from sparkdeck.presets import Preset
    from sparkdeck.runtime.client import DockerRuntime
    from sparkdeck.runtime.state import EngineState

PresetRow = tuple[str, str, str, str, str]
"""One line of the preset table: id, the memory it will claim, image, model, kind.

The claim comes second so that it stays in view on a narrow terminal (the rest scrolls)."""


def claim_cell(preset: Preset, total: int | None, guard: GuardSettings) -> str:
    """The guard's claim in GiB, "~" when partly estimated, "unknown" when it cannot be sized
    (how it was reached is in the launch confirmation). Without MemTotal, the engine's knob."""
    if total is None:
        return preset.memory_setting()
    claim = preset.memory_claim(total, guard)
    if claim.bytes is None:
        return "unknown"
    return f"{'~' if claim.estimated else ''}{claim.bytes / 2**30:.1f} GiB"


def preset_rows(
    catalog: PresetCatalog, total: int | None = None, guard: GuardSettings | None = None
) -> list[PresetRow]:
    """The preset table's lines, in id order. Claims are computed here, in the worker that
    read the files: llama.cpp's reads the GGUF header when the model is on this machine."""
    guard = guard or GuardSettings()
    return [
        (
            preset.id,
            claim_cell(preset, total, guard),
            preset.image,
            preset.model or "-",
            preset.kind,
        )
        for _, preset in sorted(catalog.presets.items())
    ]


def model_cell(preset: Preset) -> str:
    """The preset table's "on disk" cell: the size of the preset's model on this machine,
    "missing" for a Hub repo not in the mounted cache (a launch downloads it first), "-"
    where sparkdeck cannot tell (Ollama keeps its own models; a custom server; a path
    inside the image). Reads the cache and file sizes only, never the Hub."""
    from pathlib import Path

    from sparkdeck.launch.model_step import hub_model
    from sparkdeck.models.hub_model import bytes_on_disk, cached_snapshot
    from sparkdeck.models.plan import gguf_on_host
    from sparkdeck.presets import PresetError

    try:
        spec = preset.container_spec()
    except (PresetError, ValueError, KeyError, TypeError):
        return "-"
    found: Path | None = None
    model = hub_model(preset, spec)
    if model is not None:
        found = cached_snapshot(model.cache, model.repo)
        if found is None:
            return "missing"
    elif preset.model.endswith(".gguf"):
        found = gguf_on_host(preset.model, preset.volumes)
    elif preset.model and Path(preset.model).expanduser().is_dir():
        found = Path(preset.model).expanduser()
    if found is None:
        return "-"
    return f"{bytes_on_disk(found) / 2**30:.1f} GiB"


def model_cells(presets: Sequence[Preset]) -> dict[str, str]:
    """model_cell for each preset, by id (run in a worker: it walks the cache)."""
    return {preset.id: model_cell(preset) for preset in presets}


def memory_total() -> int | None:
    """MemTotal in bytes for sizing claims; None when /proc/meminfo cannot be read."""
    from sparkdeck.host.meminfo import MemInfoError, read_meminfo

    try:
        return read_meminfo().total
    except (MemInfoError, OSError):
        return None


# ----- the engine -------------------------------------------------------------------------


def answers(url: str) -> bool:
    """sparkdeck.endpoints.answers (the one health check), loaded at its first call: the
    resolver is not needed for the first frame (benchmarks/tui_idle.py)."""
    from sparkdeck.endpoints import answers as endpoint_answers

    return endpoint_answers(url)


@dataclass(frozen=True)
class EngineReading:
    """The current sparkdeck engine (or None) and whether its health endpoint said 200."""

    engine: EngineState | None
    healthy: bool = False

    @property
    def status(self) -> str:
        """ready, starting, crashed (exit code N), another Docker state, or no engine."""
        engine = self.engine
        if engine is None:
            return "no engine running"
        if engine.crashed:
            code = "unknown" if engine.exit_code is None else engine.exit_code
            return f"crashed (exit code {code})"
        if engine.alive:
            return "ready" if self.healthy and engine.docker_state == "running" else "starting"
        return engine.docker_state


class EngineReader:
    """Reads the current engine, connecting to Docker on first use and again after a loss.

    Safe to call from several worker threads: one read runs at a time, so a slow daemon
    never gets two connection attempts from us at once.
    """

    def __init__(
        self,
        runtime_factory: Callable[[], DockerRuntime],
        health_check: Callable[[str], bool] = answers,
    ):
        self._runtime_factory = runtime_factory
        self.health_check = health_check
        self._runtime: DockerRuntime | None = None
        self._lock = threading.Lock()
        self._failure: tuple[float, DockerUnavailable] | None = None  # (when, the last one)

    def runtime(self) -> DockerRuntime:
        """The connected runtime (connecting now if needed); raises DockerUnavailable.

        A caller that waited while another thread's connection attempt failed gets that
        failure at once instead of trying again: with a hung daemon, `s` pressed during an
        engine poll answers within one timeout, not two."""
        asked = time.monotonic()
        with self._lock:
            if self._runtime is None:
                if self._failure is not None and self._failure[0] >= asked:
                    raise self._failure[1]
                try:
                    self._runtime = self._runtime_factory()
                except DockerUnavailable as exc:
                    self._failure = (time.monotonic(), exc)
                    raise
                self._failure = None
            return self._runtime

    def read(self) -> EngineReading:
        """Raises DockerUnavailable when the daemon cannot be reached."""
        runtime = self.runtime()
        try:
            engine = runtime.current()
        except DockerUnavailable:
            with self._lock:
                self._runtime = None
            raise
        healthy = (
            engine is not None
            and engine.docker_state == "running"
            and self.health_check(engine.base_url + engine.health_path)
        )
        return EngineReading(engine, healthy)


# ----- what the chat tab talks to ---------------------------------------------------------

NO_ENGINE = (
    'no engine is ready to chat with: launch a preset (l) and wait for "ready", or '
    "attach one that sparkdeck did not start: sparkdeck attach URL"
)


@dataclass(frozen=True)
class ChatTarget:
    """The engine the chat tab talks to, or None and the sentence that says why not."""

    endpoint: Endpoint | None
    note: str = NO_ENGINE
    instance: str = ""  # the container id of a managed engine: a relaunch is a new pane


def chat_target(
    reading: EngineReading | None, health_check: Callable[[str], bool] = answers
) -> ChatTarget:
    """What sparkdeck.endpoints.resolve chooses (the same as `sparkdeck chat` without
    --endpoint), from the engine poll's reading: its health answer is not asked again.
    `reading` is None when Docker cannot be reached: an attached engine needs no Docker."""
    engine = reading.engine if reading is not None else None
    healthy = reading.status == "ready" if reading is not None and engine is not None else None
    from sparkdeck.endpoints import resolve

    resolved = resolve(engine, healthy, health_check=health_check)
    return ChatTarget(resolved.endpoint, resolved.why_none or NO_ENGINE, resolved.instance or "")
