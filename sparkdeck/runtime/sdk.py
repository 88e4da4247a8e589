"""What the docker SDK hands back, in sparkdeck's terms: its connection failures as typed
errors, an API error's text, a container as an EngineState.

The one translation of the SDK's failures, used by the runtime client and the log follower
alike, so a stopped or hung daemon reads the same everywhere, and no raw
`UnixHTTPConnectionPool... Read timed out` reaches a user.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import docker.errors
import requests.exceptions

from sparkdeck.runtime.errors import (
    DOCKER_TIMEOUT_S,
    DockerNotAnswering,
    DockerUnavailable,
    is_timeout_text,
    unavailable_message,
)
from sparkdeck.runtime.state import (
    HEALTH,
    KIND,
    METRICS,
    MODEL,
    PRESET,
    SPEC_HASH,
    URL,
    EngineState,
)


@contextmanager
def daemon_errors(seconds: float = DOCKER_TIMEOUT_S) -> Iterator[None]:
    """Turn "cannot talk to the daemon" in any of its SDK shapes into DockerUnavailable, and
    "it took the connection but never replied" (a stopped or hung dockerd) into
    DockerNotAnswering, so no raw `UnixHTTPConnectionPool... Read timed out` reaches a user."""
    try:
        yield
    except requests.exceptions.Timeout as exc:  # before ConnectionError: ConnectTimeout is both
        raise DockerNotAnswering(seconds, str(exc)) from exc
    except requests.exceptions.ConnectionError as exc:
        if is_timeout_text(str(exc)):  # a timeout while reading a reply's body
            raise DockerNotAnswering(seconds, str(exc)) from exc
        raise DockerUnavailable(unavailable_message(str(exc))) from exc
    except docker.errors.APIError:
        raise
    except docker.errors.DockerException as exc:
        if is_timeout_text(str(exc)):  # from_env()'s version look-up timed out
            raise DockerNotAnswering(seconds, str(exc)) from exc
        raise DockerUnavailable(unavailable_message(str(exc))) from exc


def api_text(exc: docker.errors.APIError) -> str:
    """What the daemon said, without the SDK's wrapping."""
    explanation = exc.explanation
    if isinstance(explanation, bytes):
        explanation = explanation.decode("utf-8", "replace")
    return str(explanation or exc)


EXITED = ("exited", "dead")  # Docker's states of a container whose process has ended


def has_exited(container: Any) -> bool:
    """Whether the container's process has ended (Docker's inspected state)."""
    return container.attrs.get("State", {}).get("Status", container.status) in EXITED


def engine_state(container: Any, log_tail: tuple[str, ...] = ()) -> EngineState:
    """A container as the frozen EngineState sparkdeck passes around (its labels say which
    preset, kind, model and address; Docker's state says how it is)."""
    labels = container.labels or {}
    attrs = container.attrs
    state = attrs.get("State", {})
    docker_state = state.get("Status", container.status)
    return EngineState(
        container_id=container.id,
        name=container.name,
        preset_id=labels.get(PRESET, ""),
        kind=labels.get(KIND, ""),
        image=attrs.get("Config", {}).get("Image", ""),
        model=labels.get(MODEL, ""),
        base_url=labels.get(URL, ""),
        health_path=labels.get(HEALTH, "/health"),
        metrics_path=labels.get(METRICS) or None,
        spec_hash=labels.get(SPEC_HASH, ""),
        docker_state=docker_state,
        exit_code=state.get("ExitCode") if docker_state in EXITED else None,
        started_at=state.get("StartedAt"),
        log_tail=log_tail,
        image_id=attrs.get("Image", ""),
        argv=tuple(str(a) for a in [attrs.get("Path") or "", *(attrs.get("Args") or [])] if a),
        published_on=published_on(attrs),
    )


def published_on(attrs: dict[str, Any]) -> str:
    """The host address a container's ports are bound to ("" without published ports)."""
    bindings = (attrs.get("HostConfig") or {}).get("PortBindings") or {}
    hosts = {b.get("HostIp") or "0.0.0.0" for v in bindings.values() for b in (v or [])}
    if hosts & {"0.0.0.0", "::"}:
        return "0.0.0.0"
    return min(hosts) if hosts else ""
