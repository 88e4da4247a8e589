"""Following one launch that the service runs, for a front end: the CLI prints its lines, a
window moves its engine card and its memory-wait screen.

The event stream is opened (and its hello read) before the launch is asked for, so no event
of this launch can be missed. Only this launch's events are passed on; the others on the
stream (telemetry, another client's doings) are skipped here.

Two endings are not the launch's own result, and each is said in one line:

- Ctrl-C (KeyboardInterrupt in the following thread) asks the service to cancel and waits
  for the launch's outcome, which says what is running then. The interrupt ends the stream
  it broke into (its generator is closed by the exception), so a new one is opened before
  the cancel is asked for: the outcome cannot be missed.
- The service going away mid-launch (kill -9, a crash) breaks the stream: ServiceLost, whose
  line says what happened, what Docker has running now, and what to do.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import httpx

from sparkdeck.service import ServiceError
from sparkdeck.service.client import ServiceClient

Events = Iterator[tuple[str, dict[str, Any]]]
# The stream carries a keep-alive every second; this long without a byte and the service is
# called stopped (SIGSTOP) or wedged, and the launch's follower says so instead of waiting on.
# Longer than a window's 2 s: a launch is not guarded by its follower, only reported.
SILENT_S = 5.0
# A killed process closes its sockets a moment before the kernel marks it a zombie: a stream
# that broke (not one that went silent) gives its service this long to be seen gone.
DYING_S = 1.0
OnEvent = Callable[[str, dict[str, Any]], None]


class ServiceLost(ServiceError):
    """The service ended (or stopped answering) before the launch did; the message says
    what is running now and what to do."""


class StoppedWaiting(ServiceError):
    """A second Ctrl-C: this front end stopped waiting for the cancel, which the service (it
    answers) carries on; not a lost service."""


def follow_launch(
    client: ServiceClient,
    preset: str,
    options: dict[str, Any],
    on_event: OnEvent,
    *,
    skip: threading.Event | None = None,
    on_interrupt: Callable[[], None] | None = None,
) -> dict[str, Any]:
    """Launch `preset` through the service; each of its events (kind, data) goes to
    `on_event` until the `launch-result`, which is returned ({"ok", "engine" | "error"}).

    `skip`, once set, ends the launch's wait for the stopped engine's memory (asked once,
    at the next event: the stream carries telemetry every second). Ctrl-C asks the service
    to cancel the launch and waits for its outcome (no container is created after it);
    `on_interrupt` says so first. Raises ServiceError when the service refuses the launch
    (one in flight, an unknown preset), ServiceLost when it ends before the launch does.
    """
    launch_id: int | None = None
    try:
        with client.events(read_timeout=SILENT_S) as events:
            _hello(events)
            launch_id = client.launch(preset, **options)
            try:
                return _until_result(client, events, launch_id, on_event, skip)
            except KeyboardInterrupt:
                if on_interrupt is not None:
                    on_interrupt()
        return _cancel(client, launch_id, on_event)
    except httpx.TransportError as exc:  # the stream broke: the service is gone
        raise ServiceLost(lost_line(preset, launch_id is not None, exc)) from None
    except ServiceError as exc:
        if exc.status is None and launch_id is not None and not isinstance(exc, StoppedWaiting):
            # no answer mid-launch: gone too
            raise ServiceLost(lost_line(preset, True, exc)) from None
        raise


def _hello(events: Events) -> None:
    kind, _ = next(events)
    if kind != "hello":
        raise ServiceError(f"the service's event stream began with {kind!r}, not hello")


def _until_result(
    client: ServiceClient,
    events: Events,
    launch_id: int,
    on_event: OnEvent,
    skip: threading.Event | None,
) -> dict[str, Any]:
    skipped = False
    for kind, data in events:
        if skip is not None and skip.is_set() and not skipped:
            skipped = True
            client.skip_switch_wait()
        if data.get("launch") != launch_id:
            continue
        if kind == "launch-result":
            return data
        on_event(kind, data)
    raise httpx.RemoteProtocolError("the service's event stream ended")


def _cancel(client: ServiceClient, launch_id: int, on_event: OnEvent) -> dict[str, Any]:
    """Ask the service to cancel `launch_id`; its outcome. A second Ctrl-C stops waiting
    (the service still cancels: nothing new is started) and says so."""
    try:
        with client.events(read_timeout=SILENT_S) as events:
            _hello(events)
            if not client.cancel_launch():  # it had ended before the cancel: its result
                ended = client.status()["latest"].get("launch-result") or {}
                if ended.get("launch") == launch_id:
                    return ended
            return _until_result(client, events, launch_id, on_event, None)
    except KeyboardInterrupt:
        raise StoppedWaiting(
            "stopped waiting: the service goes on cancelling the launch (no "
            "engine is started after a cancel); `sparkdeck status` says what "
            "runs"
        ) from None


def lost_line(preset: str, mid_launch: bool, exc: Exception) -> str:
    """What happened, what runs now (as Docker says, not as planned), what to do."""
    from sparkdeck.config.file_lock import FileLock
    from sparkdeck.service.server import SERVICE_LOCK

    # who held the service lock last, as it wrote itself down (a kill -9 leaves that);
    # not taken here: a service being restarted at this moment must not find it held
    holder = FileLock(SERVICE_LOCK).holder()
    if holder is not None and _alive_after(holder.pid, exc):
        what = f"the sparkdeck service (process {holder.pid}) stopped answering ({exc})"
    else:
        what = f"the sparkdeck service{f' (process {holder.pid})' if holder else ''} ended"
    what += f" during the launch of {preset}" if mid_launch else ""
    return f"{what}; {running_now()}"


def running_now() -> str:
    """sparkdeck's engines as Docker lists them now, with what to do about each case."""
    from sparkdeck.runtime import connect
    from sparkdeck.runtime.errors import DockerRuntimeError

    try:
        engines = [e for e in connect().engines() if e.alive]
    except DockerRuntimeError as exc:
        return (
            f"Docker cannot say what runs ({exc}): run `sparkdeck status`, and "
            "`sparkdeck service start` to guard whatever does"
        )
    if not engines:
        return "no sparkdeck engine is running now; `sparkdeck launch` tries again"
    names = ", ".join(f"{e.preset_id or '?'} ({e.name})" for e in engines)
    return (
        f"running now with no memory guard: {names}; `sparkdeck service start` guards "
        "it again, `sparkdeck stop` stops it"
    )


def _alive_after(pid: int, exc: Exception) -> bool:
    """Whether `pid` still runs after its stream failed with `exc`. A stream that went
    silent (a timeout) is a live service that stopped answering; one that broke is most
    often a service that ended, whose exit closed the socket before the kernel marked it a
    zombie: beside load that moment lasted long enough to call a kill -9 "stopped
    answering" (a parallel CI run). So a broken stream waits up to DYING_S for it."""
    if isinstance(exc, httpx.TimeoutException):
        return _alive(pid)
    deadline = time.monotonic() + DYING_S
    while _alive(pid):
        if time.monotonic() >= deadline:
            return True
        time.sleep(0.02)
    return False


def _alive(pid: int) -> bool:
    """Whether `pid` runs; a killed service is a zombie until its parent reaps it, and its
    parent is this process when this command started it."""
    try:
        if os.waitpid(pid, os.WNOHANG)[0] == pid:
            return False
    except ChildProcessError:  # not ours
        pass
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return f.read().rsplit(b")", 1)[1].split()[0] != b"Z"
    except (OSError, IndexError):
        return False
