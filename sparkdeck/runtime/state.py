"""What sparkdeck knows of one of its containers (EngineState) and the labels that mark it.

Kept apart from sparkdeck.runtime.client so that code which only reads a snapshot (the UI,
endpoints, the benchmark's fingerprint) does not need the docker SDK to name the type. The
labels are the whole of sparkdeck's claim on a container: only containers carrying
`io.sparkdeck.managed=true` in sparkdeck's scope are ever stopped or removed.

EngineEvents follows Docker's own event stream for the containers with those labels, so a
change is known when it happens: the service's guard follower waits on it instead of asking
Docker twice a second (that polling alone cost ~0.4 % of a core on an idle box). The stream
has no read timeout: it is quiet for as long as nothing changes. It ends when the daemon goes
away; the caller then falls back to polling and reconnects.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

from sparkdeck.runtime.errors import DockerRuntimeError

if TYPE_CHECKING:
    from sparkdeck.runtime.client import DockerRuntime
    from sparkdeck.runtime.spec import ContainerSpec

LABEL = "io.sparkdeck."
MANAGED, SCOPE, PRESET, SPEC_HASH = (LABEL + n for n in ("managed", "scope", "preset", "spec-hash"))
KIND, URL, HEALTH, METRICS, MODEL = (
    LABEL + n for n in ("kind", "url", "health-path", "metrics-path", "model")
)
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
    # the host address its port is published on; 0.0.0.0 (a preset's `lan = true`) means
    # every interface: anyone who can reach the host can use the engine
    published_on: str = ""

    @property
    def on_lan(self) -> bool:
        return self.published_on in ("0.0.0.0", "::")

    def lan_warning(self) -> str:
        """What a user must be told when the engine listens beyond this machine."""
        port = self.base_url.rsplit(":", 1)[-1]
        return (
            f"published on every interface ({self.published_on}:{port}, the preset's "
            "lan = true): anyone who can reach this machine can use the engine, "
            "with no key"
        )

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
        MANAGED: "true",
        SCOPE: scope,
        PRESET: spec.preset_id,
        SPEC_HASH: spec.spec_hash(),
        KIND: spec.kind,
        URL: spec.base_url,
        HEALTH: spec.health_path,
        METRICS: spec.metrics_path or "",
        MODEL: spec.model,
        **dict(spec.extra_labels),
    }


def docker_time(stamp: str | None) -> float | None:
    """A time Docker writes (RFC 3339 with nanoseconds: a log line's stamp, StartedAt) as
    seconds since the epoch; None when absent, unreadable, or Docker's zero time (0001-...).
    Python's parser takes at most 6 fractional digits."""
    if not stamp or stamp.startswith("0001-"):
        return None
    head, dot, rest = stamp.partition(".")
    if not dot:  # no fraction: the zone follows the seconds
        head, rest = stamp[:19], stamp[19:]
    digits = rest[: len(rest) - len(rest.lstrip("0123456789"))]
    zone = rest[len(digits) :]
    zone = "+00:00" if zone in ("Z", "") else zone
    try:
        return datetime.fromisoformat(f"{head}.{(digits + '000000')[:6]}{zone}").timestamp()
    except ValueError:
        return None


class EngineEvents:
    """Iterate for one item per Docker event on sparkdeck's containers in this scope
    (create, start, die, destroy, ...): the action's name. `close()` ends the iteration from
    another thread."""

    def __init__(self, runtime: DockerRuntime) -> None:
        try:
            self._stream = runtime.client.events(
                decode=True,
                filters={
                    "type": "container",
                    "label": [f"{MANAGED}=true", f"{SCOPE}={runtime.scope}"],
                },
            )
        except Exception as exc:  # noqa: BLE001 - any SDK failure: no stream, poll instead
            raise DockerRuntimeError(f"cannot follow Docker's events: {exc}") from None

    def __iter__(self) -> Iterator[str]:
        try:
            for event in self._stream:
                yield str(event.get("Action") or event.get("status") or "")
        except Exception:  # noqa: BLE001 - the daemon went away mid-stream: the end
            return

    def close(self) -> None:
        try:
            self._stream.close()
        except Exception:  # noqa: BLE001 - already closed
            pass
