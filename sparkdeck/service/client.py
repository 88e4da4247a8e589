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

from sparkdeck.config import paths
from sparkdeck.service import ServiceError, ServiceVersionMismatch, location
from sparkdeck.service.location import API_VERSION
from sparkdeck.service.start_report import REPORT_FD_ENV, read_report

__all__ = [
    "ServiceClient",
    "ServiceError",
    "ServiceVersionMismatch",
    "ensure_running",
    "running",
    "start_detached",
]

VERSION_HEADER = "X-Sparkdeck-Api"
# What the stream's keep-alive (an SSE comment) is yielded as: httpx-sse hands it on as a
# nameless "message" once an event with an id has come (the last event id outlives the event,
# as the SSE spec says); the service never sends a nameless event itself.
KEEP_ALIVE = "keep-alive"
START_TIMEOUT_S = 15.0  # bounds a slow start; a failed one is reported when it fails


class ServiceClient:
    def __init__(
        self, socket_path: os.PathLike[str] | str | None = None, timeout: float = 30.0
    ) -> None:
        self.path = os.fspath(socket_path or location.socket_path())
        self._http = httpx.Client(
            transport=httpx.HTTPTransport(uds=self.path),
            base_url="http://sparkdeck",
            timeout=timeout,
            headers={VERSION_HEADER: str(API_VERSION)},
        )

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> ServiceClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ----- calls --------------------------------------------------------------------------

    def status(self) -> dict[str, Any]:
        return self._call("GET", "/status")

    def heartbeat(self) -> dict[str, Any]:
        """Answered from the service's memory at once (sparkdeck.service.liveness)."""
        return self._call("GET", "/heartbeat")

    def plan(self, preset: str, flush: str = "auto") -> dict[str, Any]:
        return self._call("GET", "/plan", params={"preset": preset, "flush": flush})

    def launch(self, preset: str, **options: Any) -> int:
        return int(self._call("POST", "/launch", json={"preset": preset, **options})["launch"])

    def cancel_launch(self) -> bool:
        return bool(self._call("POST", "/launch/cancel")["cancelled"])

    def skip_switch_wait(self) -> bool:
        return bool(self._call("POST", "/launch/skip-wait")["skipped"])

    def stop(self, grace: float | None = None) -> list[dict[str, Any]]:
        body = {"grace": grace} if grace is not None else {}
        # the grace, then Docker's kill and the removal
        timeout = 90.0 + (grace if grace is not None else 30.0)
        return list(self._call("POST", "/stop", json=body, timeout=timeout)["stopped"])

    @contextmanager
    def events(
        self,
        read_timeout: float | None = None,
        kinds: tuple[str, ...] = (),
        replay: tuple[str, ...] | None = None,
    ) -> Iterator[Iterator[tuple[str, dict[str, Any]]]]:
        """The event stream as (kind, data) pairs, from the service's hello on;
        `read_timeout`: the longest silence taken (a keep-alive comes every second, and may
        be yielded as (KEEP_ALIVE, {}));
        `kinds`: only these (the latest of each first, or of those in `replay` when given),
        instead of every event."""
        import json

        from httpx_sse import connect_sse

        with connect_sse(
            self._http,
            "GET",
            f"/v{API_VERSION}/events",
            params=_stream_params(kinds, replay),
            timeout=httpx.Timeout(30.0, read=read_timeout),
        ) as source:
            self._check(source.response)

            def pairs() -> Iterator[tuple[str, dict[str, Any]]]:
                for sse in source.iter_sse():
                    if sse.event == "message" and not sse.data:
                        yield KEEP_ALIVE, {}
                    else:
                        yield sse.event, json.loads(sse.data) if sse.data else {}

            yield pairs()

    def _call(self, method: str, path: str, **kwargs: Any) -> dict[str, Any]:
        try:
            response = self._http.request(method, f"/v{API_VERSION}{path}", **kwargs)
        except httpx.TransportError as exc:
            raise ServiceError(
                f"the sparkdeck service at {self.path} does not answer "
                f"({exc}); `sparkdeck service status` says more"
            ) from None
        self._check(response)
        return response.json()

    def _check(self, response: httpx.Response) -> None:
        served = response.headers.get(VERSION_HEADER)
        if served is not None and served != str(API_VERSION):
            raise ServiceVersionMismatch(
                f"the running sparkdeck service speaks API v{served}, this sparkdeck "
                f"v{API_VERSION}: restart the service with this version (`sparkdeck service "
                "stop`, then `sparkdeck service start`)",
                response.status_code,
            )
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


def start_detached() -> tuple[subprocess.Popen, int]:
    """Start the service (location.service_argv) in its own session (it outlives this
    process and its terminal), its output in the data dir's service.log. Returns the process
    and the read end of the pipe on which it reports its start (start_report): the caller
    reads it and closes it."""
    log = location.log_path()
    paths.ensure_dir(log.parent)
    fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, paths.PRIVATE_FILE)
    read, write = os.pipe()
    try:
        process = subprocess.Popen(
            location.service_argv(),
            stdin=subprocess.DEVNULL,
            stdout=fd,
            stderr=fd,
            start_new_session=True,
            close_fds=True,
            pass_fds=(write,),
            env={**os.environ, REPORT_FD_ENV: str(write)},
        )
    except BaseException:
        os.close(read)
        raise
    finally:
        os.close(fd)
        os.close(write)  # the service's copy is the only one: its exit gives us EOF
    return process, read


def ensure_running(timeout: float = START_TIMEOUT_S) -> tuple[ServiceClient, bool]:
    """The running service's client, starting the service when none answers; (client,
    started) where `started` says this call started it. What keeps it from starting is
    raised as ServiceError as soon as the service says so or ends (a second or so), not
    after `timeout`, which only bounds a start that is slow but alive."""
    client = running()
    if client is not None:
        return client, False
    from sparkdeck.service.server import check_before_start
    from sparkdeck.service.start_report import StartFailed

    try:
        check_before_start()  # the usual reasons, said without starting a second Python
    except StartFailed as exc:
        raise ServiceError(_start_failure({"error": str(exc), "kind": exc.kind})) from None
    process, report_fd = start_detached()
    deadline = time.monotonic() + timeout
    try:
        report = read_report(report_fd, process, deadline)
    finally:
        os.close(report_fd)
    if report is not None and not report.get("ok") and report.get("kind") != "running":
        raise ServiceError(_start_failure(report))
    # it started, or another service started at the same moment holds the lock: it answers
    while True:
        client = running()
        if client is not None:
            return client, bool(report and report.get("ok"))
        if time.monotonic() >= deadline:
            raise ServiceError(
                f"the sparkdeck service did not answer within {timeout:g} s of "
                f"its start (see {location.log_path()})"
            )
        time.sleep(0.05)


def _start_failure(report: dict[str, Any]) -> str:
    """The one line for a service that did not start: what it said, else what its log
    last said (a traceback's last line names the error)."""
    error = str(report.get("error") or "no reason given")
    if report.get("kind") == "unreachable":
        return error
    if report.get("kind") == "died":
        error += f"; its log {location.log_path()} ends: {_log_tail(location.log_path())}"
    return f"the sparkdeck service did not start: {error}"


def _log_tail(log: os.PathLike[str]) -> str:
    try:
        with open(log, "rb") as f:
            f.seek(max(0, os.fstat(f.fileno()).st_size - 2048))
            lines = f.read().decode("utf-8", "replace").splitlines()
    except OSError as exc:
        return f"(unreadable: {exc})"
    return next((line.strip() for line in reversed(lines) if line.strip()), "(empty)")


def other_dirs(status: dict[str, Any]) -> str | None:
    """Why this front end and the running service would not mean the same thing (None when
    they would): the service reads presets and settings from its own config dir and keeps
    records in its own data dir, so a front end of other dirs would launch the service's
    presets, not its own."""
    theirs = status.get("dirs") or {}
    ours = {"config": str(paths.config_dir()), "data": str(paths.data_dir())}
    differ = [
        f"its {kind} dir is {theirs[kind]}, this command's {ours[kind]}"
        for kind in ("config", "data")
        if theirs.get(kind) is not None
        and os.path.realpath(theirs[kind]) != os.path.realpath(ours[kind])
    ]
    if not differ:
        return None
    return (
        f"the running sparkdeck service (process {status.get('pid')}) is not this "
        f"command's: {'; '.join(differ)} (SPARKDECK_CONFIG_DIR / SPARKDECK_DATA_DIR "
        "differ). Run this with the service's dirs, or `sparkdeck service stop` and run it "
        "again to start one with these"
    )


def service_state() -> tuple[int | None, str | None, dict[str, Any] | None]:
    """(pid of the service answering on this user's socket, or None; a problem, if any;
    its endpoint's own state, as the service reports it)."""
    try:
        client = running()
    except ServiceError as exc:  # ServiceVersionMismatch: it runs, but speaks another API
        return None, str(exc), None
    if client is None:
        return None, None, None
    try:
        status = client.status()
        return int(status.get("pid", 0)) or None, None, status.get("endpoint")
    except (ServiceError, ValueError, TypeError) as exc:
        return None, str(exc), None
    finally:
        client.close()


def _stream_params(kinds: tuple[str, ...], replay: tuple[str, ...] | None) -> dict[str, str]:
    params = {"kinds": ",".join(kinds)} if kinds else {}
    if kinds and replay is not None:
        params["replay"] = ",".join(replay)
    return params
