"""EngineControl: the one way a front end (the CLI, the window) launches and stops the engine.

A front end plans a launch itself (the plan reads Docker and /proc, and the user confirms
it), then hands the confirmed plan to `engine_control()`, which alone decides who runs it:
the sparkdeck service when it runs or may be started (it then guards the engine after the
front end is gone), or this process when the service is switched off (SPARKDECK_SERVICE=off,
for tests of the launch sequence itself and for machines that want no service). Either way
the front end gets the same thing back: the launch's typed events as they happen (the
service sends them across its socket as themselves: sparkdeck.launch.wire), the engine it
started, or one typed error that says why not (with the engine's last log lines when it
exited). No front end branches on "service or in-process" itself.

The engine's guard goes the same way (`guard()`): the service's watchdog, relayed, with
this process taking over while the service does not answer, or this process's watchdog
with the service off; the front end gets typed guard events (service.guard_events) and
renders them. A front end that only guards asks `guard_control()`, which asks the service
nothing first (a service that does not answer must not hold up the guard).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from functools import cached_property
from typing import TYPE_CHECKING, Any, Protocol

from sparkdeck.launch.events import EventSink, event_from_dict
from sparkdeck.runtime.errors import EngineExited
from sparkdeck.runtime.state import EngineState
from sparkdeck.service import ServiceError

if TYPE_CHECKING:
    from sparkdeck.config.settings import GuardSettings
    from sparkdeck.guard.readings import Reading
    from sparkdeck.guard.watchdog import Watchdog
    from sparkdeck.launch.plan import LaunchFlow, LaunchPlan
    from sparkdeck.runtime.client import DockerRuntime
    from sparkdeck.service.client import ServiceClient
    from sparkdeck.service.guard_events import EngineGuard, GuardSink, GuardStream


class LaunchCancelled(Exception):
    """The launch was cancelled (Ctrl-C) before its engine was up; the message says what
    runs now."""


class EngineControl(Protocol):
    """Who runs launches and stops for a front end (see the module's docstring)."""

    by: str  # who runs the launch: "" for this process, "the service"
    notes: list[str]  # what the front end should say first (a service it started, ...)

    def launch(
        self,
        plan: LaunchPlan,
        on_event: EventSink,
        *,
        force: bool = False,
        timeout: float | None = None,
        skip: threading.Event | None = None,
        on_interrupt: Callable[[], None] | None = None,
    ) -> EngineState:
        """Run the confirmed plan; its events go to `on_event` (in this thread). Raises
        EngineExited (with the engine's last log lines), LaunchCancelled, or the error
        that stopped it (a LockBusy, a DockerRuntimeError, a ServiceError, ...)."""
        ...

    def stop(self, on_event: EventSink, grace: float | None = None) -> list[EngineState]:
        """Stop sparkdeck's engines (`grace`: seconds from SIGTERM to SIGKILL, None for
        the default); those stopped. Each step goes to `on_event` as it happens."""
        ...

    def guard(
        self,
        engine: EngineState,
        runtime: DockerRuntime,
        settings: GuardSettings,
        on_event: GuardSink,
        done: threading.Event,
        hz: Callable[[], float],
        read: Callable[[], Reading] | None = None,
        stream: GuardStream | None = None,
    ) -> EngineGuard:
        """Follow `engine`'s guard until `done` (the returned guard's `run()`, in the
        caller's thread): each decision, stop attempt, guard stop and change of who guards
        goes to `on_event` as a typed event. `hz`: this process's watchdog's rate, read at
        each wait; `read`: its reading source (the host's by default); `stream`: the
        service's events as this front end already reads them (a window's service feed),
        else the guard opens a stream of its own."""
        ...

    def close(self) -> None: ...


class LocalControl:
    """The launch sequence in this process (the service switched off)."""

    by = ""

    def __init__(self, flow: Callable[[], LaunchFlow]) -> None:
        self._make_flow = flow  # made when a launch or stop needs it (guarding does not)
        self.notes: list[str] = []

    @cached_property
    def flow(self) -> LaunchFlow:
        return self._make_flow()

    def launch(
        self,
        plan: LaunchPlan,
        on_event: EventSink,
        *,
        force: bool = False,
        timeout: float | None = None,
        skip: threading.Event | None = None,
        on_interrupt: Callable[[], None] | None = None,
    ) -> EngineState:
        return self.flow.run(
            plan, on_event, threading.Event(), force=force, skip_switch_wait=skip, timeout=timeout
        )

    def stop(self, on_event: EventSink, grace: float | None = None) -> list[EngineState]:
        return self.flow.stop(on_event, grace)

    def guard(
        self,
        engine: EngineState,
        runtime: DockerRuntime,
        settings: GuardSettings,
        on_event: GuardSink,
        done: threading.Event,
        hz: Callable[[], float],
        read: Callable[[], Reading] | None = None,
        stream: GuardStream | None = None,
    ) -> EngineGuard:
        from sparkdeck.service.guard_events import LocalGuard

        return LocalGuard(
            own_watchdog(engine, runtime, settings, on_event, read), done, hz, on_event
        )

    def close(self) -> None:
        pass


class ServiceControl:
    """The service runs the launch; this front end follows it (launch_follow). Made without
    a client (guard_control), it connects at its first launch or stop."""

    def __init__(self, client: ServiceClient | None, status: dict[str, Any], started: bool) -> None:
        self._client = client
        self.by = "the service"
        self.notes = []
        if started:
            from sparkdeck.endpoint.listener import endpoint_line

            self.notes.append(
                f"started the sparkdeck service (process {status.get('pid')}): "
                "it guards the engine after this command ends"
            )
            endpoint = status.get("endpoint") or {}
            if not endpoint.get("on", True):  # it runs without it: said now, not in its log
                self.notes.append(f"sparkdeck: {endpoint_line(endpoint)}")

    def launch(
        self,
        plan: LaunchPlan,
        on_event: EventSink,
        *,
        force: bool = False,
        timeout: float | None = None,
        skip: threading.Event | None = None,
        on_interrupt: Callable[[], None] | None = None,
    ) -> EngineState:
        from sparkdeck.service.launch_follow import follow_launch

        def relay(kind: str, data: dict[str, Any]) -> None:
            match kind:
                case "launch-event":  # the typed event itself
                    on_event(event_from_dict(data["event"]))

        options = {
            "flush": "auto" if plan.flush else "no",
            "force": force,
            "timeout": timeout,
            "skip_switch_wait": bool(skip is not None and skip.is_set()),
        }
        result = follow_launch(
            self.client, plan.preset.id, options, relay, skip=skip, on_interrupt=on_interrupt
        )
        if result.get("ok"):
            return engine_from(result["engine"])
        raise launch_error(result)

    def stop(self, on_event: EventSink, grace: float | None = None) -> list[EngineState]:
        """The service stops the engine; its steps come back as it takes them (`stop-event`,
        read on the event stream opened before the stop is asked for) and end with its
        `stop-result`. The request itself waits in a thread of its own meanwhile."""
        from sparkdeck.service.launch_follow import SILENT_S

        asked: dict[str, Any] = {}

        def ask() -> None:
            try:
                asked["stopped"] = self.client.stop(grace)
            except BaseException as exc:  # noqa: BLE001 - handed to the caller's thread
                asked["error"] = exc

        import httpx

        try:
            with self.client.events(read_timeout=SILENT_S) as events:
                if next(events)[0] != "hello":  # the stream is live before the stop begins
                    raise ServiceError("the service's event stream did not begin with hello")
                request = threading.Thread(target=ask, name="stop request", daemon=True)
                request.start()
                for kind, data in events:  # telemetry comes every second: checked that often
                    if kind == "stop-event":
                        on_event(event_from_dict(data["event"]))
                    if kind == "stop-result" or "error" in asked:
                        break
        except httpx.TransportError as exc:  # it ended or went silent mid-stop
            from sparkdeck.service.launch_follow import running_now

            raise ServiceError(
                f"the sparkdeck service stopped answering during the stop ({exc}); {running_now()}"
            ) from None
        request.join()
        if "error" in asked:
            raise asked["error"]
        return [engine_from(e) for e in asked["stopped"]]

    @property
    def client(self) -> ServiceClient:
        if self._client is None:
            from sparkdeck.service.client import ensure_running

            client, _ = ensure_running()
            checked_status(client)
            self._client = client
        return self._client

    def guard(
        self,
        engine: EngineState,
        runtime: DockerRuntime,
        settings: GuardSettings,
        on_event: GuardSink,
        done: threading.Event,
        hz: Callable[[], float],
        read: Callable[[], Reading] | None = None,
        stream: GuardStream | None = None,
    ) -> EngineGuard:
        """The service's watchdog, relayed; this process's own guards while the service
        does not answer (relay.FrontGuard: it makes its own connections, each time the
        service answers again, so the control's client is not used)."""
        from sparkdeck.service.relay import FrontGuard

        return FrontGuard(
            own_watchdog(engine, runtime, settings, on_event, read), done, hz, on_event, stream
        )

    def close(self) -> None:
        if self._client is not None:
            self._client.close()


def own_watchdog(
    engine: EngineState,
    runtime: DockerRuntime,
    settings: GuardSettings,
    on_event: GuardSink,
    read: Callable[[], Reading] | None,
) -> Watchdog:
    """This process's watchdog of `engine` (guard.watchdog's one factory), reporting as
    guard events."""
    from sparkdeck.guard.watchdog import engine_watchdog
    from sparkdeck.service.guard_events import Decided, ReadFailed, StopTried

    return engine_watchdog(
        settings,
        runtime,
        engine,
        read=read,
        on_decision=lambda decision: on_event(Decided(decision)),
        on_attempt=lambda attempt: on_event(StopTried(attempt)),
        on_error=lambda exc: on_event(ReadFailed(exc)),
    )


def engine_from(data: dict[str, Any]) -> EngineState:
    """An engine as the service reports it (EngineState.to_dict), typed again."""
    from sparkdeck.launch.wire import decode

    engine: EngineState = decode(EngineState, data)
    return engine


def launch_error(result: dict[str, Any]) -> Exception:
    """The typed error for a launch-result that is not ok (the service's word for it)."""
    error = str(result.get("error") or "the launch failed")
    if result.get("error_type") == "LaunchInterrupted":
        return LaunchCancelled(error)
    tail: Sequence[str] = result.get("log_tail") or ()
    if tail:
        return EngineExited(error, None, tail)
    return ServiceError(error)


def engine_control(flow: Callable[[], LaunchFlow], *, start: bool = True) -> EngineControl:
    """Who runs this front end's launches and stops: the service when it is on (started when
    `start` and none runs; a window passes False and runs the launch itself then), else this
    process through `flow()`. Raises ServiceError when the service is on but cannot be
    started, or when its config or data dir is not this front end's (its presets would be
    launched, not ours)."""
    from sparkdeck.service import location

    if location.enabled():
        from sparkdeck.service.client import ensure_running, running

        client, started = ensure_running() if start else (running(), False)
        if client is not None:
            return ServiceControl(client, checked_status(client), started)
    return LocalControl(flow)


def checked_status(client: ServiceClient) -> dict[str, Any]:
    """The service's status, once it is known to use this front end's config and data dirs
    (else ServiceError, and `client` is closed: its presets would be launched, not ours)."""
    from sparkdeck.service.client import other_dirs

    try:
        status = client.status()
        if (mismatch := other_dirs(status)) is not None:
            raise ServiceError(mismatch)
    except BaseException:
        client.close()
        raise
    return status


def guard_control(flow: Callable[[], LaunchFlow] | None = None) -> EngineControl:
    """The owner whose guard a front end follows: the service whenever it is switched on,
    whether it runs, answers or not (its guard starts a service that is gone, takes over
    from one that does not answer and hands back), else this process. Asks the service
    nothing: that is the guard's first step, which says what it found as events."""
    from sparkdeck.service import location

    if location.enabled():
        return ServiceControl(None, {}, started=False)
    return LocalControl(flow or _plain_flow)


def _plain_flow() -> LaunchFlow:
    from sparkdeck.config.settings import load_settings
    from sparkdeck.launch.plan import LaunchFlow
    from sparkdeck.runtime import connect

    return LaunchFlow(connect, guard=load_settings().guard)
