"""The one translation of the docker SDK's connection failures into sparkdeck's typed errors.

Used by the runtime client and the log follower alike, so a stopped or hung daemon reads the
same everywhere, and no raw `UnixHTTPConnectionPool... Read timed out` reaches a user.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import docker.errors
import requests.exceptions

from sparkdeck.runtime.errors import (
    DOCKER_TIMEOUT_S,
    DockerNotAnswering,
    DockerUnavailable,
    is_timeout_text,
    unavailable_message,
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
