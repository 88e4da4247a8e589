"""Blocking reads the UI runs in thread workers, returning frozen values it can render.

Nothing here imports Textual: each reader is a plain function or class that a worker calls
and that tests can call directly. Machine telemetry (memory, PSI, GPU) is read by
sparkdeck.telemetry.TelemetrySampler; this module holds the preset and engine reads.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from sparkdeck.docker_errors import DockerUnavailable
from sparkdeck.presets import Preset, PresetCatalog
from sparkdeck.settings import GuardSettings

if TYPE_CHECKING:  # the docker SDK loads with the first Docker call, not with the UI
    from sparkdeck.docker_runtime import DockerRuntime
    from sparkdeck.engine_state import EngineState
    from sparkdeck.endpoints import Endpoint

HEALTH_TIMEOUT_S = 1.5

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


def preset_rows(catalog: PresetCatalog, total: int | None = None,
                guard: GuardSettings | None = None) -> list[PresetRow]:
    """The preset table's lines, in id order. Claims are computed here, in the worker that
    read the files: llama.cpp's reads the GGUF header when the model is on this machine."""
    guard = guard or GuardSettings()
    return [
        (preset.id, claim_cell(preset, total, guard), preset.image, preset.model or "-",
         preset.kind)
        for _, preset in sorted(catalog.presets.items())
    ]


def memory_total() -> int | None:
    """MemTotal in bytes for sizing claims; None when /proc/meminfo cannot be read."""
    from sparkdeck.host.meminfo import MemInfoError, read_meminfo

    try:
        return read_meminfo().total
    except (MemInfoError, OSError):
        return None


# ----- the engine -------------------------------------------------------------------------

def endpoint_answers(url: str) -> bool:
    """True when GET url answers 200: the engine's own word that it is ready."""
    import httpx

    try:
        return httpx.get(url, timeout=HEALTH_TIMEOUT_S).status_code == 200
    except httpx.HTTPError:
        return False


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

    def __init__(self, runtime_factory: Callable[[], DockerRuntime],
                 health_check: Callable[[str], bool] = endpoint_answers):
        self._runtime_factory = runtime_factory
        self.health_check = health_check
        self._runtime: DockerRuntime | None = None
        self._lock = threading.Lock()

    def runtime(self) -> DockerRuntime:
        """The connected runtime (connecting now if needed); raises DockerUnavailable."""
        with self._lock:
            if self._runtime is None:
                self._runtime = self._runtime_factory()
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
        healthy = (engine is not None and engine.docker_state == "running"
                   and self.health_check(engine.base_url + engine.health_path))
        return EngineReading(engine, healthy)


# ----- what the chat tab talks to ---------------------------------------------------------

NO_ENGINE = ("no engine is ready to chat with: launch a preset (l) and wait for \"ready\", or "
             "attach one that sparkdeck did not start: sparkdeck attach URL")


@dataclass(frozen=True)
class ChatTarget:
    """The engine the chat tab talks to, or None and the sentence that says why not."""

    endpoint: Endpoint | None
    note: str = NO_ENGINE
    instance: str = ""  # the container id of a managed engine: a relaunch is a new pane


def chat_target(reading: EngineReading | None,
                health_check: Callable[[str], bool] = endpoint_answers) -> ChatTarget:
    """sparkdeck's engine when it is ready, else the one attached engine when it answers its
    health path (the same choice as `sparkdeck chat` without --endpoint). `reading` is None
    when Docker cannot be reached: an attached engine needs no Docker."""
    from sparkdeck.endpoints import AttachedRegistry, EndpointError, managed_endpoint

    if reading is not None and reading.engine is not None and reading.status == "ready":
        return ChatTarget(managed_endpoint(reading.engine),
                          instance=reading.engine.container_id)
    try:
        attached = AttachedRegistry().load()
    except EndpointError as exc:
        return ChatTarget(None, str(exc))
    if len(attached) > 1:
        names = ", ".join(f"{e.name} ({e.url})" for e in attached)
        return ChatTarget(None, f"several engines are attached ({names}): the chat tab talks "
                                "to one; detach the others (sparkdeck detach NAME) or use "
                                "sparkdeck chat --endpoint URL")
    if attached:
        endpoint = attached[0]
        if health_check(endpoint.url + endpoint.health_path):
            return ChatTarget(endpoint)
        return ChatTarget(None, f"the attached engine {endpoint.name} ({endpoint.url}) does "
                                f"not answer {endpoint.health_path}; start it, or launch a "
                                "preset (l)")
    return ChatTarget(None)
