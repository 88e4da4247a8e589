"""Engines reached by URL: probing what a server is, its health, the attached registry, and
the one resolver of which engine to talk to (`resolve`, `resolve_endpoint`).

Many owners run engines by hand, with compose or another launcher. `sparkdeck attach URL`
records such a server (in the data dir) so status, metrics, chat and benchmark work with it;
sparkdeck never stops what it did not start, so an attached engine is only ever read.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from sparkdeck.config import paths
from sparkdeck.config.toml_files import TomlFileError, read_toml
from sparkdeck.engines import EndpointProbe, get_kind, identify
from sparkdeck.text_safety import excerpt

if TYPE_CHECKING:
    from sparkdeck.runtime.state import EngineState

PROBE_PATHS = (
    "/health",
    "/v1/models",
    "/metrics",
    "/api/version",
    "/props",
    "/version",
    "/get_server_info",
)
_BODY_LIMIT = 16_384


class EndpointError(Exception):
    """A server could not be reached or recognised; the message says what to do."""


class NoEngine(EndpointError):
    """No engine was named, none of sparkdeck's runs, and the attached ones do not decide."""


@dataclass(frozen=True)
class Endpoint:
    """An engine's address and what sparkdeck needs to know to talk to it."""

    name: str
    url: str
    kind: str
    health_path: str
    metrics_path: str | None
    source: str  # "managed", "attached" or "flag"
    preset_id: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class EndpointStatus:
    endpoint: Endpoint
    reachable: bool
    healthy: bool
    health_code: int | None
    models: tuple[str, ...]
    error: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            **self.endpoint.to_dict(),
            "reachable": self.reachable,
            "healthy": self.healthy,
            "health_code": self.health_code,
            "models": list(self.models),
            "error": self.error,
        }


def normalise_url(url: str) -> str:
    url = url.strip().rstrip("/")
    if "://" not in url:
        url = "http://" + url
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise EndpointError(f"{url!r} is not an http(s) URL such as http://127.0.0.1:8000")
    if parts.path.endswith("/v1"):
        url = url[: -len("/v1")]  # people paste the OpenAI base URL; sparkdeck adds /v1 itself
    return url


def probe(url: str, timeout: float = 3.0) -> EndpointProbe:
    """Ask a server a few well-known paths; raise EndpointError when nothing answers."""
    import httpx  # here, not at the top: the TUI reads the registry on its first poll

    from sparkdeck.http_limits import capped_client, read_head

    answers: dict[str, tuple[int, str]] = {}
    last_error: Exception | None = None
    with capped_client(timeout=timeout) as client:
        for path in PROBE_PATHS:
            try:
                # only the start of each answer is needed to tell the kind: an endless body
                # (seen: /metrics) is cut there, never read whole
                with client.stream("GET", url + path) as response:
                    head = read_head(response, _BODY_LIMIT)
            except httpx.ReadTimeout as exc:
                # connected, then silence: a hung engine answers no other path either, and
                # asking each would multiply the wait by len(PROBE_PATHS)
                raise EndpointError(
                    f"the engine is not answering (no reply from {url}{path} "
                    f"within {timeout:g} s): is it hung or overloaded?"
                ) from exc
            except httpx.TransportError as exc:
                last_error = exc
                continue
            answers[path] = (response.status_code, head.decode("utf-8", "replace"))
    if not answers:
        raise EndpointError(
            f"nothing answers at {url} ({last_error}): is the engine running "
            "and is the address right?"
        )
    return EndpointProbe(url, answers)


def endpoint_for(
    url: str, kind: str | None = None, name: str | None = None, source: str = "flag"
) -> Endpoint:
    """An Endpoint for a URL, detecting the engine kind from its answers when not given."""
    url = normalise_url(url)
    if kind is None:
        engine = identify(probe(url))
        if engine is None:
            raise EndpointError(
                f"{url} answers but does not look like an OpenAI-compatible "
                "server (no /v1/models); pass --kind if you know what it is"
            )
    else:
        engine = get_kind(kind)
    return Endpoint(
        name or urlsplit(url).netloc,
        url,
        engine.name,
        engine.health_path,
        engine.metrics_path,
        source,
    )


def check(endpoint: Endpoint, timeout: float = 3.0) -> EndpointStatus:
    """Is the server up and healthy, and which models does it serve?"""
    import httpx

    from sparkdeck.http_limits import capped_client

    try:
        with capped_client(timeout=timeout) as client:
            health = client.get(endpoint.url + endpoint.health_path)
            models: tuple[str, ...] = ()
            if health.status_code == 200:
                listed = client.get(endpoint.url + "/v1/models")
                if listed.status_code == 200:
                    try:
                        models = tuple(
                            excerpt(str(m.get("id")), 200)
                            for m in listed.json().get("data", [])
                            if isinstance(m, dict)
                        )
                    except (ValueError, AttributeError, RecursionError):
                        models = ()
    except httpx.ReadTimeout:
        return EndpointStatus(
            endpoint, False, False, None, (), f"not answering (no reply within {timeout:g} s)"
        )
    except httpx.TransportError as exc:
        return EndpointStatus(
            endpoint, False, False, None, (), f"unreachable: {excerpt(str(exc), 300)}"
        )
    return EndpointStatus(endpoint, True, health.status_code == 200, health.status_code, models)


class AttachedRegistry:
    """The engines a user attached, kept in attached.toml in the data dir."""

    def __init__(self, path: Any = None):
        self.path = path or paths.data_dir() / "attached.toml"

    def load(self) -> list[Endpoint]:
        try:
            data = read_toml(self.path, missing_ok=True)
        except TomlFileError as exc:  # not UTF-8, not TOML, nested too deep, unreadable
            raise EndpointError(f"{exc}; fix or delete it") from None
        rows = data.get("engine", [])
        if not isinstance(rows, list):
            raise EndpointError(
                f"{self.path}: engine must be an array of tables ([[engine]]); fix or delete it"
            )
        return [self._row(i, item) for i, item in enumerate(rows)]

    def _row(self, i: int, item: Any) -> Endpoint:
        """One [[engine]] row, every field's type checked (the file may have been edited)."""
        where = f"{self.path}: engine[{i}]"
        if not isinstance(item, dict):
            raise EndpointError(f"{where} must be a table; fix or delete the file")
        for key in ("name", "url", "kind", "health_path", "metrics_path"):
            if key in item and not isinstance(item[key], str):
                raise EndpointError(
                    f"{where}.{key} must be a string, not "
                    f"{type(item[key]).__name__}; fix or delete the file"
                )
        missing = [key for key in ("name", "url", "kind") if key not in item]
        if missing:
            raise EndpointError(f"{where} lacks {', '.join(missing)}; fix or delete the file")
        try:
            engine = get_kind(item["kind"])
        except KeyError:
            raise EndpointError(
                f"{where}.kind {item['kind']!r} is not an engine kind; fix or delete the file"
            ) from None
        return Endpoint(
            item["name"],
            item["url"],
            engine.name,
            item.get("health_path", engine.health_path),
            item.get("metrics_path", engine.metrics_path) or None,
            "attached",
        )

    def _save(self, endpoints: list[Endpoint]) -> None:
        import tomli_w

        rows = [
            {
                "name": e.name,
                "url": e.url,
                "kind": e.kind,
                "health_path": e.health_path,
                "metrics_path": e.metrics_path or "",
                "attached_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
            }
            for e in endpoints
        ]
        paths.atomic_write_text(self.path, tomli_w.dumps({"engine": rows}))

    def _lock(self) -> Any:
        # Read-modify-write: parallel `attach` runs take turns, or the last writer wins and
        # the others' entries vanish although each printed "attached".
        from sparkdeck.config.file_lock import FileLock

        return FileLock("attached", "update attached.toml").acquire_or_raise(timeout=30.0)

    def add(self, endpoint: Endpoint) -> None:
        """Record an engine; one with the same name or URL is replaced."""
        with self._lock():
            kept = [e for e in self.load() if e.name != endpoint.name and e.url != endpoint.url]
            self._save([*kept, Endpoint(**{**endpoint.to_dict(), "source": "attached"})])

    def remove(self, name_or_url: str) -> bool:
        with self._lock():
            current = self.load()
            kept = [e for e in current if name_or_url not in (e.name, e.url)]
            if len(kept) == len(current):
                return False
            self._save(kept)
            return True


def managed_endpoint(engine: EngineState) -> Endpoint:
    """The endpoint of an engine sparkdeck started (what chat, bench and metrics talk to)."""
    return Endpoint(
        engine.name,
        normalise_url(engine.base_url),
        get_kind(engine.kind).name,
        engine.health_path,
        engine.metrics_path,
        "managed",
        engine.preset_id,
    )


# ----- which engine to talk to: the one resolver --------------------------------------------

HEALTH_TIMEOUT_S = 1.5


def answers(url: str, timeout: float = HEALTH_TIMEOUT_S) -> bool:
    """The health check: True when GET url answers 200, the engine's own word that it is
    ready. Capped: a health answer that never ends must not fill a front end's memory."""
    import httpx

    from sparkdeck.http_limits import get_capped

    try:
        return get_capped(url, timeout=timeout).status_code == 200
    except httpx.HTTPError:
        return False


@dataclass(frozen=True)
class Resolved:
    """The engine to talk to, or why there is none (`why_none` None: no engine at all)."""

    endpoint: Endpoint | None
    why_none: str | None = None
    instance: str | None = None  # sparkdeck's container id when the engine is its own

    def require(self, purpose: str) -> Endpoint:
        """The endpoint, or NoEngine saying why not; `purpose` finishes "no engine to ..."
        (e.g. "chat with", "benchmark")."""
        if self.endpoint is not None:
            return self.endpoint
        raise NoEngine(
            self.why_none
            or f"no engine to {purpose}: launch one (`sparkdeck "
            "launch PRESET`), attach one (`sparkdeck attach URL`), or pass "
            "--endpoint URL"
        )


def resolve(
    current: EngineState | None,
    healthy: bool | None = None,
    *,
    health_check: Callable[[str], bool] = answers,
) -> Resolved:
    """sparkdeck's ready engine, else the one attached engine that answers, else why not.

    `current` is sparkdeck's engine (None when there is none or Docker cannot be reached: an
    attached engine needs no Docker); `healthy` is its health answer when the caller has just
    asked (the TUI's engine poll), else it is asked here. Chat, metrics, bench, status and
    the TUI all choose through this.
    """
    starting = None
    if current is not None and current.alive:
        if healthy is None:
            healthy = current.docker_state == "running" and health_check(
                current.base_url + current.health_path
            )
        if healthy:
            return Resolved(managed_endpoint(current), instance=current.container_id)
        starting = (
            f"sparkdeck's engine {current.preset_id or current.name} is not ready "
            'yet: wait for "ready"'
        )
    try:
        attached = AttachedRegistry().load()
    except EndpointError as exc:  # a bad attached.toml: say which file and what is wrong
        return Resolved(None, str(exc))
    if len(attached) > 1:
        names = ", ".join(f"{e.name} ({e.url})" for e in attached)
        return Resolved(
            None,
            f"several engines are attached ({names}): pass --endpoint URL, "
            "or detach the others (sparkdeck detach NAME)",
        )
    if attached:
        endpoint = attached[0]
        if health_check(endpoint.url + endpoint.health_path):
            return Resolved(endpoint)
        return Resolved(
            None,
            starting
            or f"the attached engine {endpoint.name} "
            f"({endpoint.url}) does not answer {endpoint.health_path}; start it, "
            "or launch a preset",
        )
    return Resolved(None, starting)


def resolve_endpoint(url: str | None, kind: str | None, purpose: str) -> Endpoint:
    """--endpoint when given, else `resolve` with sparkdeck's engine looked up: what `chat`,
    `metrics` and `bench` use. Raises NoEngine (an EndpointError) saying why there is none."""
    if url:
        return endpoint_for(url, kind)
    from sparkdeck.runtime import current_engine

    return resolve(current_engine()[1]).require(purpose)
