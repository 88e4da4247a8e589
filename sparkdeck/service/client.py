"""Front ends' side of the service: find it, start it when absent, and talk to it.

httpx over the Unix socket (its own transport, no hand-written protocol) and httpx-sse for
the event stream. Every request says which API version this front end speaks; an answer
from a service of another version is turned into ServiceVersionMismatch with what to do.
"""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import httpx

from sparkdeck import paths
from sparkdeck.service import location
from sparkdeck.service.errors import ServiceError, ServiceVersionMismatch
from sparkdeck.service.location import API_VERSION

__all__ = ["ServiceClient", "ServiceError", "ServiceVersionMismatch", "ensure_running",
           "running", "start_detached"]

VERSION_HEADER = "X-Sparkdeck-Api"
START_TIMEOUT_S = 15.0  # a detached service answers well within this on a loaded box


class ServiceClient:
    def __init__(self, socket_path: os.PathLike[str] | str | None = None,
                 timeout: float = 30.0) -> None:
        self.path = os.fspath(socket_path or location.socket_path())
        self._http = httpx.Client(transport=httpx.HTTPTransport(uds=self.path),
                                  base_url="http://sparkdeck", timeout=timeout,
                                  headers={VERSION_HEADER: str(API_VERSION)})

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> ServiceClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ----- calls --------------------------------------------------------------------------

    def status(self) -> dict[str, Any]:
        return self._call("GET", "/status")

    def plan(self, preset: str, flush: str = "auto") -> dict[str, Any]:
        return self._call("GET", "/plan", params={"preset": preset, "flush": flush})

    def launch(self, preset: str, **options: Any) -> int:
        return int(self._call("POST", "/launch", json={"preset": preset, **options})["launch"])

    def cancel_launch(self) -> bool:
        return bool(self._call("POST", "/launch/cancel")["cancelled"])

    def skip_switch_wait(self) -> bool:
        return bool(self._call("POST", "/launch/skip-wait")["skipped"])

    def stop(self) -> list[dict[str, Any]]:
        return list(self._call("POST", "/stop", timeout=120.0)["stopped"])

    @contextmanager
    def events(self) -> Iterator[Iterator[tuple[str, dict[str, Any]]]]:
        """The event stream as (kind, data) pairs, from the service's hello on."""
        import json

        from httpx_sse import connect_sse

        with connect_sse(self._http, "GET", f"/v{API_VERSION}/events",
                         timeout=httpx.Timeout(30.0, read=None)) as source:
            self._check(source.response)

            def pairs() -> Iterator[tuple[str, dict[str, Any]]]:
                for sse in source.iter_sse():
                    yield sse.event, json.loads(sse.data) if sse.data else {}

            yield pairs()

    def _call(self, method: str, path: str, **kwargs: Any) -> dict[str, Any]:
        try:
            response = self._http.request(method, f"/v{API_VERSION}{path}", **kwargs)
        except httpx.TransportError as exc:
            raise ServiceError(f"the sparkdeck service at {self.path} does not answer "
                               f"({exc}); `sparkdeck service status` says more") from None
        self._check(response)
        return response.json()

    def _check(self, response: httpx.Response) -> None:
        served = response.headers.get(VERSION_HEADER)
        if served is not None and served != str(API_VERSION):
            raise ServiceVersionMismatch(
                f"the running sparkdeck service speaks API v{served}, this sparkdeck "
                f"v{API_VERSION}: restart the service with this version (`sparkdeck service "
                "stop`, then `sparkdeck service start`)", response.status_code)
        if response.status_code >= 400:
            response.read()
            try:
                message = response.json()["error"]
            except (ValueError, KeyError, TypeError):
                message = response.text[:500]
            raise ServiceError(message, response.status_code)


def running(timeout: float = 2.0) -> ServiceClient | None:
    """A client of the service when one answers on this user's socket, else None."""
    try:
        path = location.socket_path()
    except ValueError:
        return None
    if not path.exists():
        return None
    client = ServiceClient(path, timeout=timeout)
    try:
        client.status()
    except ServiceVersionMismatch:
        client.close()
        raise
    except ServiceError:
        client.close()
        return None
    client._http.timeout = httpx.Timeout(30.0)
    return client


def start_detached() -> int:
    """Start the service (location.service_argv) in its own session (it outlives this
    process and its terminal), its output in the data dir's service.log; the pid."""
    log = location.log_path()
    paths.ensure_dir(log.parent)
    fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, paths.PRIVATE_FILE)
    try:
        process = subprocess.Popen(
            location.service_argv(), stdin=subprocess.DEVNULL,
            stdout=fd, stderr=fd, start_new_session=True, close_fds=True)
    finally:
        os.close(fd)
    return process.pid


def ensure_running(timeout: float = START_TIMEOUT_S) -> tuple[ServiceClient, bool]:
    """The running service's client, starting the service when none answers; (client,
    started) where `started` says this call started it."""
    client = running()
    if client is not None:
        return client, False
    pid = start_detached()
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        time.sleep(0.1)
        client = running()
        if client is not None:
            return client, True
        _exited(pid)  # reaped if it ended (another service won the race: it answers)
    raise ServiceError(f"the sparkdeck service did not start (see {location.log_path()})")


def _exited(pid: int) -> bool:
    try:
        done, _ = os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        return True
    return done == pid
