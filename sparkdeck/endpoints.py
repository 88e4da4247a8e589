"""Engines reached by URL: probing what a server is, its health, and the attached registry.

Many owners run engines by hand, with compose or another launcher. `sparkdeck attach URL`
records such a server (in the data dir) so status, metrics, chat and benchmark work with it;
sparkdeck never stops what it did not start, so an attached engine is only ever read.
"""

from __future__ import annotations

import time
import tomllib
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from sparkdeck import paths
from sparkdeck.engines import EndpointProbe, get_kind, identify

if TYPE_CHECKING:
    from sparkdeck.engine_state import EngineState

PROBE_PATHS = ("/health", "/v1/models", "/metrics", "/api/version", "/props", "/version",
               "/get_server_info")
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
        return {**self.endpoint.to_dict(), "reachable": self.reachable, "healthy": self.healthy,
                "health_code": self.health_code, "models": list(self.models),
                "error": self.error}


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

    answers: dict[str, tuple[int, str]] = {}
    last_error: Exception | None = None
    with httpx.Client(timeout=timeout) as client:
        for path in PROBE_PATHS:
            try:
                response = client.get(url + path)
            except httpx.TransportError as exc:
                last_error = exc
                continue
            answers[path] = (response.status_code, response.text[:_BODY_LIMIT])
    if not answers:
        raise EndpointError(f"nothing answers at {url} ({last_error}): is the engine running "
                            "and is the address right?")
    return EndpointProbe(url, answers)


def endpoint_for(url: str, kind: str | None = None, name: str | None = None,
                 source: str = "flag") -> Endpoint:
    """An Endpoint for a URL, detecting the engine kind from its answers when not given."""
    url = normalise_url(url)
    if kind is None:
        engine = identify(probe(url))
        if engine is None:
            raise EndpointError(f"{url} answers but does not look like an OpenAI-compatible "
                                "server (no /v1/models); pass --kind if you know what it is")
    else:
        engine = get_kind(kind)
    return Endpoint(name or urlsplit(url).netloc, url, engine.name, engine.health_path,
                    engine.metrics_path, source)


def check(endpoint: Endpoint, timeout: float = 3.0) -> EndpointStatus:
    """Is the server up and healthy, and which models does it serve?"""
    import httpx

    try:
        with httpx.Client(timeout=timeout) as client:
            health = client.get(endpoint.url + endpoint.health_path)
            models: tuple[str, ...] = ()
            if health.status_code == 200:
                listed = client.get(endpoint.url + "/v1/models")
                if listed.status_code == 200:
                    try:
                        models = tuple(str(m.get("id")) for m in listed.json().get("data", [])
                                       if isinstance(m, dict))
                    except (ValueError, AttributeError):
                        models = ()
    except httpx.TransportError as exc:
        return EndpointStatus(endpoint, False, False, None, (), f"unreachable: {exc}")
    return EndpointStatus(endpoint, True, health.status_code == 200, health.status_code, models)


class AttachedRegistry:
    """The engines a user attached, kept in attached.toml in the data dir."""

    def __init__(self, path: Any = None):
        self.path = path or paths.data_dir() / "attached.toml"

    def load(self) -> list[Endpoint]:
        try:
            data = tomllib.loads(self.path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return []
        except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
            raise EndpointError(f"{self.path}: cannot be read ({exc}); fix or delete it") from exc
        found = []
        for i, item in enumerate(data.get("engine", [])):
            try:
                engine = get_kind(item["kind"])
                found.append(Endpoint(item["name"], item["url"], engine.name,
                                      item.get("health_path", engine.health_path),
                                      item.get("metrics_path", engine.metrics_path) or None,
                                      "attached"))
            except (KeyError, TypeError) as exc:
                raise EndpointError(f"{self.path}: engine[{i}] is malformed ({exc})") from exc
        return found

    def _save(self, endpoints: list[Endpoint]) -> None:
        import tomli_w

        rows = [{"name": e.name, "url": e.url, "kind": e.kind, "health_path": e.health_path,
                 "metrics_path": e.metrics_path or "",
                 "attached_at": time.strftime("%Y-%m-%dT%H:%M:%S%z")} for e in endpoints]
        paths.atomic_write_text(self.path, tomli_w.dumps({"engine": rows}))

    def add(self, endpoint: Endpoint) -> None:
        """Record an engine; one with the same name or URL is replaced."""
        kept = [e for e in self.load() if e.name != endpoint.name and e.url != endpoint.url]
        self._save([*kept, Endpoint(**{**endpoint.to_dict(), "source": "attached"})])

    def remove(self, name_or_url: str) -> bool:
        current = self.load()
        kept = [e for e in current if name_or_url not in (e.name, e.url)]
        if len(kept) == len(current):
            return False
        self._save(kept)
        return True


def managed_endpoint(engine: EngineState) -> Endpoint:
    """The endpoint of an engine sparkdeck started (what chat, bench and metrics talk to)."""
    return Endpoint(engine.name, normalise_url(engine.base_url), get_kind(engine.kind).name,
                    engine.health_path, engine.metrics_path, "managed", engine.preset_id)


def choose_endpoint(url: str | None, kind: str | None, current: EngineState | None,
                    purpose: str) -> Endpoint:
    """--endpoint when given, else sparkdeck's running engine, else the one attached engine.

    `purpose` finishes the sentence "no engine to ..." (e.g. "chat with", "benchmark").
    Raises NoEngine when nothing decides which server is meant.
    """
    if url:
        return endpoint_for(url, kind)
    if current is not None and current.alive:
        return managed_endpoint(current)
    attached = AttachedRegistry().load()
    if len(attached) == 1:
        return attached[0]
    if attached:
        names = ", ".join(f"{e.name} ({e.url})" for e in attached)
        raise NoEngine(f"several attached engines ({names}): pass --endpoint URL")
    raise NoEngine(f"no engine to {purpose}: launch one (`sparkdeck launch PRESET`), attach "
                   "one (`sparkdeck attach URL`), or pass --endpoint URL")
