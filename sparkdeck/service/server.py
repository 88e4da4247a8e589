"""`sparkdeck service run`: the service process itself.

One per user: the process holds the `service` lock (sparkdeck.config.file_lock: flock, dropped by
the kernel however the process ends, so a kill -9 leaves no stale lock) for its whole life.
The socket is made here, not by uvicorn (which makes its Unix sockets 0666): bound under a
0177 umask in a 0700 folder and checked 0600 before the first request. A socket file left by
a killed service is removed only while holding the lock, so a live service's socket is never
taken away. SIGTERM and SIGINT end it cleanly (uvicorn's own handlers); the engine keeps
running and the next service adopts it.

Start-up checks come first and cheaply (settings, the lock, the socket, before the owner's
modules are imported): whatever keeps the service from starting becomes one StartFailed
line, sent to the front end that started it (sparkdeck.service.start_report) as well as to
the log, so that command says it at once.
"""

from __future__ import annotations

import logging
import os
import socket
import stat
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sparkdeck.config.file_lock import FileLock
from sparkdeck.config.settings import Settings, SettingsError, load_settings
from sparkdeck.service import location, service_log
from sparkdeck.service.liveness import protect_from_oom
from sparkdeck.service.start_report import StartFailed, StartReport

if TYPE_CHECKING:
    from sparkdeck.service.engine_metrics import EngineMetricsLoop
    from sparkdeck.service.hub import EventHub
    from sparkdeck.service.owner import EngineOwner

SERVICE_LOCK = "service"
TELEMETRY_PERIOD_S = 1.0
STARTING_PERIOD_S = 0.5  # while an engine starts (ui.machine.tab's STARTING_SAMPLE_SECONDS)
SOCKET_RACE_S = 0.5  # how long a service that just took the lock may take to bind its socket

log = logging.getLogger("sparkdeck.service")


def bind_private_socket(path: Path) -> socket.socket:
    location.ensure_private_dir(path.parent)
    if path.exists() or path.is_symlink():
        if not stat.S_ISSOCK(path.lstat().st_mode):  # not ours to remove: say so
            raise _not_a_socket(path)
        path.unlink()  # a dead service's socket (we hold the lock: no live one owns it)
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    old = os.umask(0o177)
    try:
        sock.bind(os.fspath(path))
    finally:
        os.umask(old)
    os.chmod(path, 0o600)
    sock.listen(64)
    sock.set_inheritable(False)
    return sock


class TelemetryLoop:
    """The machine's readings at 1 Hz, published as `telemetry` events and handed to the
    recorders (`sinks`), whether or not any window is open. While an engine starts (the
    dangerous phase: `starting()`) the events come at 2 Hz, the rate a window samples at
    then: a window connected to the service draws these instead of reading the machine
    itself (sparkdeck.ui.service_feed). The recorders still get one sample a second."""

    def __init__(self, hub: EventHub, starting: Callable[[], bool] = lambda: False) -> None:
        self.hub = hub
        self.sinks: list = []
        self._starting = starting
        self._sunk_at = float("-inf")  # when the recorders were last handed a sample
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="telemetry", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        from sparkdeck.telemetry.sampler import History, TelemetrySampler

        sampler = TelemetrySampler()
        try:
            sampler.run(History(), self._period, self._emit, self._stop)
        finally:
            sampler.close()

    def _period(self) -> float:
        return STARTING_PERIOD_S if self._starting() else TELEMETRY_PERIOD_S

    def _emit(self, snapshot, frozen) -> None:
        self.hub.publish("telemetry", **snapshot.to_dict())
        if snapshot.taken_at - self._sunk_at < 0.9 * TELEMETRY_PERIOD_S:
            return  # a 2 Hz sample in between: the recorders keep 1 Hz
        self._sunk_at = snapshot.taken_at
        for sink in self.sinks:
            sink(snapshot)

    def close(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)


async def _serve(
    server,
    sock: socket.socket,
    metrics: EngineMetricsLoop,
    owner: EngineOwner,
    report: StartReport,
    endpoint: Callable[[], Any] | None = None,
) -> None:
    import asyncio

    task = asyncio.create_task(metrics.run(), name="engine metrics")
    listener = _open_endpoint(endpoint, owner) if endpoint is not None else None
    try:
        if listener is not None:
            listener.start()
        report.ready(endpoint=owner.endpoint)  # the socket listens: connections queue
        await server.serve(sockets=[sock])
    finally:
        task.cancel()
        if listener is not None:
            await listener.stop()


def _open_endpoint(make: Callable[[], Any], owner: EngineOwner) -> Any:
    """The OpenAI endpoint's listener, or None when its port cannot be had: the guard runs
    on without it (a taken port must not leave an engine unguarded). Its state is the
    owner's (`endpoint` in the status), so front ends report the endpoint's own state
    instead of probing whatever program holds the port."""
    try:
        listener = make()
    except OSError as exc:
        why = os.strerror(exc.errno) if exc.errno else str(exc)  # uvicorn's text adds noise
        owner.endpoint = {
            "on": False,
            "error": why,
            "address": owner.endpoint.get("address"),
            "fix": "another program holds the port? set [endpoint] port in "
            "settings.toml or stop that program, then restart the "
            "service: `sparkdeck service stop`, `sparkdeck service start`",
        }
        log.warning(
            "the OpenAI endpoint is off: %s on %s (%s)",
            why,
            owner.endpoint["address"],
            owner.endpoint["fix"],
        )
        return None
    host, port = listener.address
    owner.endpoint = {
        "on": True,
        "address": _address(host, port),
        "url": f"http://{_address(host, port)}/v1",
    }
    log.info("OpenAI endpoint on http://%s:%s/v1", host, port)
    return listener


def _address(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def _file_kind(path: Path) -> str:
    mode = path.lstat().st_mode
    return (
        "a regular file"
        if stat.S_ISREG(mode)
        else "a folder"
        if stat.S_ISDIR(mode)
        else "a symbolic link"
        if stat.S_ISLNK(mode)
        else "not a socket"
    )


def _settings() -> Settings:
    try:
        return load_settings()
    except SettingsError as exc:  # not UTF-8, too deep, a bad value: the file says which
        problems = "; ".join(str(p) for p in exc.problems)
        raise StartFailed(
            f"{problems}: fix settings.toml (or move it away), then run this again"
        ) from None


def _socket_path() -> Path:
    try:
        return location.socket_path()
    except ValueError as exc:  # too long for a Unix socket
        raise StartFailed(str(exc)) from None


def check_before_start() -> None:
    """The start-up checks a front end makes itself before it starts a service, with this
    module's words: a bad settings.toml, a socket path that is not a socket, a service that
    runs but whose socket is gone. Each is then said without a second Python starting (a
    second or more on a loaded box); the service makes them all again (and the rest)."""
    _settings()
    path = _socket_path()
    if (path.exists() or path.is_symlink()) and not stat.S_ISSOCK(path.lstat().st_mode):
        raise _not_a_socket(path)
    lock = FileLock(SERVICE_LOCK)
    if not _lock_taken(lock):
        return
    problem = _already_runs(lock, path)
    if problem.kind != "running":
        raise problem


def _lock_taken(lock: FileLock) -> bool:
    """Whether a process holds `lock` (FileLock.held_by: a front end's check never takes
    the service's lock; where /proc/locks cannot say, False: the service checks again)."""
    return lock.held_by() is not None


def _start_up() -> tuple[Settings, FileLock, Path, socket.socket]:
    """Everything that can keep the service from starting, checked before anything starts:
    the settings, the one-per-user lock, the socket and the endpoint's exposure (last: its
    module is the slow one to import). Raises StartFailed (one line, what to do); the lock
    is held on return."""
    settings = _settings()
    path = _socket_path()
    lock = FileLock(SERVICE_LOCK, "the sparkdeck service")
    if not lock.acquire(blocking=False):
        raise _already_runs(lock, path)
    try:
        sock = bind_private_socket(path)
    except OSError as exc:  # a folder of another user, a full or read-only runtime dir
        lock.release()
        raise StartFailed(
            f"the service cannot make its socket {path}: {exc}; set "
            "SPARKDECK_RUNTIME_DIR to a folder of yours, then run this again"
        ) from None
    except BaseException:
        lock.release()
        raise
    from sparkdeck.endpoint.listener import EndpointRefused, check_exposure

    try:
        check_exposure(settings.endpoint)
    except EndpointRefused as exc:
        sock.close()
        path.unlink(missing_ok=True)
        lock.release()
        raise StartFailed(str(exc)) from None
    return settings, lock, path, sock


def _not_a_socket(path: Path) -> StartFailed:
    return StartFailed(
        f"{path} is not a socket ({_file_kind(path)}), so the service cannot listen there: "
        f"remove it (`rm {path}`) or set SPARKDECK_RUNTIME_DIR to another folder, then run "
        "this again"
    )


def _already_runs(lock: FileLock, path: Path) -> StartFailed:
    """Another service holds the lock. One that just took it binds its socket within
    moments (a racing start: the starter then finds it answering); one whose socket was
    removed can never be reached, and only stopping it helps."""
    holder = lock.holder()
    who = f" (process {holder.pid})" if holder else ""
    deadline = time.monotonic() + SOCKET_RACE_S
    while not path.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    if path.exists():
        return StartFailed(f"the service already runs{who}", kind="running", code=1)
    return StartFailed(
        f"the service already runs{who} but its socket {path} was removed, so no front end "
        "can reach it: `sparkdeck service stop` ends it (the engine keeps running), then run "
        "this again",
        kind="unreachable",
        code=1,
    )


def serve() -> int:
    """Run the service in this process until SIGTERM/SIGINT; 1 if one already runs, 2 if
    something else keeps it from starting (the line on stderr and to the starter says what)."""
    report = StartReport.from_env()
    _log_to(location.log_path())
    try:
        settings, lock, path, sock = _start_up()
    except StartFailed as exc:
        log.error("%s", exc if exc.kind != "failed" else f"the service will not start: {exc}")
        report.failed(exc)
        return exc.code
    try:
        return _run(settings, path, sock, report)
    except Exception as exc:  # a bug: the log has the traceback, the starter a line
        log.critical("the service failed", exc_info=True)
        report.failed(
            StartFailed(
                f"{type(exc).__name__}: {exc} (a bug: the traceback is in {location.log_path()})"
            )
        )
        return 70  # EX_SOFTWARE
    finally:
        lock.release()


def _run(settings: Settings, path: Path, sock: socket.socket, report: StartReport) -> int:
    import uvicorn
    import uvloop

    from sparkdeck.endpoint.listener import listen_address
    from sparkdeck.runtime import connect
    from sparkdeck.service.api import build_app
    from sparkdeck.service.engine_metrics import EngineMetricsLoop
    from sparkdeck.service.hub import EventHub
    from sparkdeck.service.owner import EngineOwner
    from sparkdeck.service.quiet_server import EndpointListener, QuietServer
    from sparkdeck.service.recording import ServiceRecording

    hub = EventHub()
    owner = EngineOwner(hub, settings.guard, connect)
    owner.endpoint = {
        "on": False,
        "address": _address(*listen_address(settings.endpoint)),
        "error": "not started yet",
    }
    follower = owner.follower
    telemetry = TelemetryLoop(
        hub,
        lambda: owner.in_flight is not None or (follower.engine is not None and not follower.ready),
    )
    metrics = EngineMetricsLoop(hub, owner.follower)
    recording = ServiceRecording.open(hub, owner, metrics, settings)
    if recording is not None:
        telemetry.sinks.append(recording)
    owner.start()
    telemetry.start()
    config = uvicorn.Config(
        build_app(owner, hub),
        log_level="warning",
        lifespan="off",
        access_log=False,
        log_config=None,
    )  # records: service_log's
    server = QuietServer(config)
    log.info("sparkdeck service %d listening on %s; %s", os.getpid(), path, protect_from_oom())
    try:
        # uvloop: the loop's sockets and callbacks in C. The endpoint's 2 ms promise on a
        # stream's first token is mostly the service's CPU on that path (its request, the
        # connection to the engine, the answer's first bytes): 1.4-1.6 ms with asyncio's
        # own loop on a 2-core host, 0.8-1.1 ms with this one (docs/performance.md)
        uvloop.run(
            _serve(
                server,
                sock,
                metrics,
                owner,
                report,
                lambda: EndpointListener(settings.endpoint, owner.follower, owner),
            )
        )
    finally:
        telemetry.close()
        if recording is not None:
            recording.close()
        owner.close()
        sock.close()
        try:
            path.unlink()
        except FileNotFoundError:
            pass
    log.info("sparkdeck service stopped (the engine, if any, keeps running)")
    return 0


def _log_to(path: Path) -> None:
    """The rotating log (service_log); where the data dir cannot hold it (unwritable, full),
    stderr only, and the first record says why."""
    try:
        service_log.setup(path)
    except OSError as exc:
        logging.basicConfig(
            level=logging.INFO, format=service_log.FORMAT, datefmt=service_log.DATE_FORMAT
        )
        log.warning("no log file %s (%s): logging to stderr only", path, exc)
