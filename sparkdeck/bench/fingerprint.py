"""What was benchmarked: the launch behind an endpoint, so results stay tied to settings.

For an engine sparkdeck launched this is its preset, the image's content id, the argv Docker
started and when; for any engine the kind, the model and the version the server reports
(/version, /props, ... per engine kind). Two runs with the same key measured the same launch
settings, which is what the comparison view groups by.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass
from typing import Any
from urllib.parse import urlsplit

import httpx

from sparkdeck.docker_runtime import EngineState
from sparkdeck.endpoints import Endpoint, normalise_url
from sparkdeck.engines import get_kind


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
        shaping = {"kind": self.kind, "model": self.model, "version": self.engine_version,
                   "preset": self.preset_id, "image_id": self.image_id, "argv": self.argv}
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


def fingerprint(endpoint: Endpoint, model: str, engine_version: str | None,
                managed: EngineState | None) -> LaunchFingerprint:
    """The fingerprint of `endpoint`; `managed` is sparkdeck's running container, if any,
    and counts only when it is the one serving this URL."""
    if managed is not None and managed.alive and managed.base_url and (
            normalise_url(managed.base_url) == endpoint.url):
        return LaunchFingerprint(
            url=endpoint.url, kind=endpoint.kind, model=model, engine_version=engine_version,
            source="managed", preset_id=managed.preset_id, image=managed.image,
            image_id=managed.image_id or None, argv=managed.argv,
            container_id=managed.container_id, launched_at=managed.started_at)
    return LaunchFingerprint(url=endpoint.url, kind=endpoint.kind, model=model,
                             engine_version=engine_version, source=endpoint.source,
                             preset_id=endpoint.preset_id)
