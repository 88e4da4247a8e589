"""Which engine `sparkdeck bench` measures, its launch fingerprint, and the memory watchdog
that runs beside it.

The target is --endpoint when given, else the engine sparkdeck runs, else the one attached
engine. The fingerprint ties results to settings: for an engine sparkdeck launched, its
preset, the image's content id, the argv Docker started and when; for any engine the kind,
the model and the version the server reports (/version, /props, ... per engine kind). Two
runs with the same key measured the same launch settings, which is what the comparison view
groups by. While the benchmark runs, the guard's watchdog (sparkdeck.guard) keeps watching
with its thresholds from settings.toml [guard]: when it decides to stop, the run ends with
its reasons on record and, for an engine sparkdeck launched, the engine is stopped as the
guard would; an engine sparkdeck did not start is never stopped.
"""

from __future__ import annotations

import hashlib
import json
import threading
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

import httpx

from sparkdeck.bench.runner import BenchRunner
from sparkdeck.config.settings import load_settings
from sparkdeck.endpoints import Endpoint, NoEngine, endpoint_for, normalise_url, resolve
from sparkdeck.engines import get_kind
from sparkdeck.guard.policy import STOP, Decision
from sparkdeck.guard.readings import HostReadings
from sparkdeck.guard.watchdog import engine_watchdog
from sparkdeck.runtime import current_engine

if TYPE_CHECKING:
    from sparkdeck.runtime.client import DockerRuntime
    from sparkdeck.runtime.state import EngineState

Watch = Callable[[BenchRunner], AbstractContextManager[None]]


@dataclass(frozen=True)
class LaunchFingerprint:
    """The engine and launch a benchmark ran against (None where it cannot be known)."""

    url: str
    kind: str
    model: str
    engine_version: str | None
    source: str  # "managed" (sparkdeck's container), "attached" or "flag"
    preset_id: str | None = None
    image: str | None = None
    image_id: str | None = None
    argv: tuple[str, ...] = ()
    container_id: str | None = None
    launched_at: str | None = None

    @property
    def key(self) -> str:
        """A digest of the settings that shape the figures (not of when or where it ran)."""
        shaping = {
            "kind": self.kind,
            "model": self.model,
            "version": self.engine_version,
            "preset": self.preset_id,
            "image_id": self.image_id,
            "argv": self.argv,
        }
        if self.source != "managed":
            shaping["url"] = self.url  # nothing else tells two unmanaged servers apart
        return hashlib.sha256(json.dumps(shaping, sort_keys=True).encode()).hexdigest()[:16]

    @property
    def label(self) -> str:
        """A short name for tables: the preset, else kind@host:port."""
        return self.preset_id or f"{self.kind}@{urlsplit(self.url).netloc}"

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "argv": list(self.argv), "key": self.key}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> LaunchFingerprint:
        fields = {k: v for k, v in data.items() if k in cls.__dataclass_fields__}
        fields["argv"] = tuple(fields.get("argv") or ())
        return cls(**fields)


def read_engine_version(endpoint: Endpoint, http: httpx.Client) -> str | None:
    """The version the server reports on its kind's version paths; None when none answers."""
    kind = get_kind(endpoint.kind)
    answers: dict[str, Any] = {}
    for path in kind.version_paths:
        try:
            response = http.get(endpoint.url + path)
            if response.status_code == 200:
                answers[path] = response.json()
        except (httpx.HTTPError, ValueError):
            continue
    return kind.engine_version(answers)


def fingerprint(
    endpoint: Endpoint, model: str, engine_version: str | None, managed: EngineState | None
) -> LaunchFingerprint:
    """The fingerprint of `endpoint`; `managed` is sparkdeck's running container, if any,
    and counts only when it is the one serving this URL."""
    if (
        managed is not None
        and managed.alive
        and managed.base_url
        and (normalise_url(managed.base_url) == endpoint.url)
    ):
        return LaunchFingerprint(
            url=endpoint.url,
            kind=endpoint.kind,
            model=model,
            engine_version=engine_version,
            source="managed",
            preset_id=managed.preset_id,
            image=managed.image,
            image_id=managed.image_id or None,
            argv=managed.argv,
            container_id=managed.container_id,
            launched_at=managed.started_at,
        )
    return LaunchFingerprint(
        url=endpoint.url,
        kind=endpoint.kind,
        model=model,
        engine_version=engine_version,
        source=endpoint.source,
        preset_id=endpoint.preset_id,
    )


class NoBenchTarget(Exception):
    """Nothing to benchmark, or more than one candidate; the message says what to pass."""


def watch_with_guard(
    runtime: DockerRuntime | None, managed: EngineState | None, label: str
) -> Watch:
    """A context for the run: the guard's watchdog at its running rate beside the benchmark.

    When it decides "stop", it stops an engine sparkdeck launched (never another) and ends
    the benchmark with its reasons; its action record goes where the guard keeps them. If the
    watchdog itself cannot read the host, the run ends too: unguarded load is not an option.
    """
    guard = load_settings().guard

    @contextmanager
    def watch(runner: BenchRunner) -> Iterator[None]:
        def decided(decision: Decision) -> None:
            if decision.level == STOP:
                runner.cancel(f"memory watchdog: {'; '.join(decision.reasons)}")

        # stops only an engine sparkdeck launched (`managed`); for any other it still decides
        dog = engine_watchdog(
            guard, runtime, managed, label=label, read=HostReadings(), on_decision=decided
        )
        done = threading.Event()

        def loop() -> None:
            try:
                dog.run(done, lambda: guard.running_hz)
            except Exception as exc:  # noqa: BLE001 - a reader broke: never load the engine unguarded
                runner.cancel(f"memory watchdog failed: {exc}")

        thread = threading.Thread(target=loop, name="bench-watchdog", daemon=True)
        thread.start()
        try:
            yield
        finally:
            done.set()
            thread.join(timeout=10)

    return watch


def bench_target(url: str | None, kind: str | None) -> tuple[Endpoint, EngineState | None, Watch]:
    """The endpoint to measure, sparkdeck's running engine (if any) and the watch to use:
    --endpoint, else what sparkdeck.endpoints.resolve chooses."""
    runtime, current = current_engine()  # (None, None) without Docker: attached ones work
    managed = current if current is not None and current.alive else None
    if url:
        endpoint = endpoint_for(url, kind)
        if managed is not None and normalise_url(managed.base_url) != endpoint.url:
            managed = None  # --endpoint names another server: never stop ours for it
        return endpoint, managed, watch_with_guard(runtime, managed, endpoint.name)
    resolved = resolve(current)
    try:
        endpoint = resolved.require("benchmark")
    except NoEngine as exc:
        raise NoBenchTarget(str(exc)) from None
    if managed is not None and resolved.instance != managed.container_id:
        managed = None  # the run measures an attached engine: ours is not its to stop
    return endpoint, managed, watch_with_guard(runtime if managed else None, managed, endpoint.name)
