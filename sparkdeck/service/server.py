"""`sparkdeck service run`: the service process itself.

One per user: the process holds the `service` lock (sparkdeck.file_lock: flock, dropped by
the kernel however the process ends, so a kill -9 leaves no stale lock) for its whole life.
The socket is made here, not by uvicorn (which makes its Unix sockets 0666): bound under a
0177 umask in a 0700 folder and checked 0600 before the first request. A socket file left by
a killed service is removed only while holding the lock, so a live service's socket is never
taken away. SIGTERM and SIGINT end it cleanly (uvicorn's own handlers); the engine keeps
running and the next service adopts it.
"""

from __future__ import annotations

import asyncio
import os
import socket
import stat
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from sparkdeck.file_lock import FileLock
from sparkdeck.service import location
from sparkdeck.service.engine_metrics import EngineMetricsLoop
from sparkdeck.service.hub import EventHub
from sparkdeck.service.recording import ServiceRecording
from sparkdeck.service.owner import EngineOwner
from sparkdeck.settings import load_settings

SERVICE_LOCK = "service"
TELEMETRY_PERIOD_S = 1.0


def bind_private_socket(path: Path) -> socket.socket:
    location.ensure_private_dir(path.parent)
    if path.exists() or path.is_symlink():
        if not stat.S_ISSOCK(path.lstat().st_mode):
            raise RuntimeError(f"{path} exists and is not a socket: remove it by hand")
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
    recorders (`sinks`), whether or not any window is open."""

    def __init__(self, hub: EventHub) -> None:
        self.hub = hub
        self.sinks: list = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="telemetry", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        from sparkdeck.telemetry.sampler import History, TelemetrySampler

        sampler = TelemetrySampler()
        try:
            sampler.run(History(), lambda: TELEMETRY_PERIOD_S, self._emit, self._stop)
        finally:
            sampler.close()

    def _emit(self, snapshot, frozen) -> None:  # noqa: ANN001 - TelemetrySnapshot, history
        self.hub.publish("telemetry", **snapshot.to_dict())
        for sink in self.sinks:
            sink(snapshot)

    def close(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)


async def _serve(server, sock: socket.socket,  # noqa: ANN001 - uvicorn.Server
                 metrics: EngineMetricsLoop, endpoint: Callable[[], Any] | None = None) -> None:
    task = asyncio.create_task(metrics.run(), name="engine metrics")
    listener = _open_endpoint(endpoint) if endpoint is not None else None
    try:
        if listener is not None:
            listener.start()
        await server.serve(sockets=[sock])
    finally:
        task.cancel()
        if listener is not None:
            await listener.stop()


def _open_endpoint(make: Callable[[], Any]) -> Any:
    """The OpenAI endpoint's listener, or None when its port cannot be had: the guard runs
    on without it (a taken port must not leave an engine unguarded), and the log says why."""
    try:
        listener = make()
    except OSError as exc:
        print(f"sparkdeck: the OpenAI endpoint is off: {exc} (another program holds the "
              "port? set [endpoint] port in settings.toml)", file=sys.stderr, flush=True)
        return None
    host, port = listener.address
    print(f"OpenAI endpoint on http://{host}:{port}/v1", flush=True)
    return listener


def serve() -> int:
    """Run the service in this process until SIGTERM/SIGINT; 1 if one already runs."""
    import uvicorn

    from sparkdeck.runtime import connect
    from sparkdeck.service.api import build_app
    from sparkdeck.service.endpoint import EndpointListener, EndpointRefused, check_exposure
    from sparkdeck.service.quiet_server import QuietServer

    settings = load_settings()
    try:
        check_exposure(settings.endpoint)
    except EndpointRefused as exc:
        print(f"sparkdeck: the service will not start: {exc}", file=sys.stderr)
        return 2
    lock = FileLock(SERVICE_LOCK, "the sparkdeck service")
    if not lock.acquire(blocking=False):
        holder = lock.holder()
        print(f"sparkdeck: the service already runs"
              f"{f' (process {holder.pid})' if holder else ''}", file=sys.stderr)
        return 1
    try:
        path = location.socket_path()
        sock = bind_private_socket(path)
        hub = EventHub()
        owner = EngineOwner(hub, settings.guard, connect)
        telemetry = TelemetryLoop(hub)
        metrics = EngineMetricsLoop(hub, owner.follower)
        recording = ServiceRecording.open(hub, owner, metrics, settings)
        if recording is not None:
            telemetry.sinks.append(recording)
        owner.start()
        telemetry.start()
        config = uvicorn.Config(build_app(owner, hub), log_level="warning", lifespan="off",
                                access_log=False)
        server = QuietServer(config)
        print(f"sparkdeck service {os.getpid()} listening on {path}", flush=True)
        try:
            asyncio.run(_serve(server, sock, metrics, lambda: EndpointListener(
                    settings.endpoint, owner.follower, owner)))
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
        print("sparkdeck service stopped (the engine, if any, keeps running)", flush=True)
        return 0
    finally:
        lock.release()
