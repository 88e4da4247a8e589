"""What sparkdeck knows of one of its containers (EngineState) and the labels that mark it.

Kept apart from sparkdeck.docker_runtime so that code which only reads a snapshot (the UI,
endpoints, the benchmark's fingerprint) does not need the docker SDK to name the type. The
labels are the whole of sparkdeck's claim on a container: only containers carrying
`io.sparkdeck.managed=true` in sparkdeck's scope are ever stopped or removed.
"""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass
from typing import Any

from sparkdeck.container_spec import ContainerSpec

LABEL = "io.sparkdeck."
MANAGED, SCOPE, PRESET, SPEC_HASH = (LABEL + n for n in ("managed", "scope", "preset",
                                                         "spec-hash"))
KIND, URL, HEALTH, METRICS, MODEL = (LABEL + n for n in ("kind", "url", "health-path",
                                                          "metrics-path", "model"))
ALIVE_STATES = ("created", "running", "restarting")


def default_scope() -> str:
    """Scope label: lets tests (or two users of one daemon) keep their engines apart."""
    return os.environ.get("SPARKDECK_SCOPE", "default")


@dataclass(frozen=True)
class EngineState:
    """A sparkdeck container as Docker reported it at one moment."""

    container_id: str
    name: str
    preset_id: str
    kind: str
    image: str
    model: str
    base_url: str
    health_path: str
    metrics_path: str | None
    spec_hash: str
    docker_state: str  # created, running, restarting, exited, dead, paused
    exit_code: int | None
    started_at: str | None
    log_tail: tuple[str, ...] = ()
    image_id: str = ""  # the content id (sha256:...) the container runs, not its tag
    argv: tuple[str, ...] = ()  # the process Docker started: entrypoint and command

    @property
    def alive(self) -> bool:
        return self.docker_state in ALIVE_STATES

    @property
    def crashed(self) -> bool:
        return self.docker_state in ("exited", "dead")

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["log_tail"] = list(self.log_tail)
        data["argv"] = list(self.argv)
        return data


def container_labels(spec: ContainerSpec, scope: str) -> dict[str, str]:
    """The labels a container started from `spec` carries (read back by DockerRuntime)."""
    return {
        MANAGED: "true", SCOPE: scope, PRESET: spec.preset_id, SPEC_HASH: spec.spec_hash(),
        KIND: spec.kind, URL: spec.base_url, HEALTH: spec.health_path,
        METRICS: spec.metrics_path or "", MODEL: spec.model, **dict(spec.extra_labels),
    }
