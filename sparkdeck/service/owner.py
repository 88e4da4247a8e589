"""What the service owns: the engine's launches and stops, its guard, and the samplers.

A plain object (no HTTP here; sparkdeck.service.api serves it) so the same code runs in the
long-running service and in tests. One launch at a time: a second one while the first is in
flight is refused with what is in progress ("a launch is in progress"), never raced; the
launch lock of the launch sequence still keeps out launches from other processes (a CLI with
the service off, an old TUI). Each event of a launch reaches every client as the typed value
itself (`launch-event`: sparkdeck.launch.wire), which a front end hands to the listener it
uses for a launch it runs itself; the wait screen's skip reaches the launch through
skip_switch_wait; the result is one `launch-result` event.
"""

from __future__ import annotations

import itertools
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from sparkdeck.catalog import load_catalog
from sparkdeck.config import paths
from sparkdeck.config.settings import GuardSettings
from sparkdeck.endpoints import answers
from sparkdeck.launch.events import (
    BeforeStop,
    ContainerStarted,
    LaunchEvent,
    ModelDownloading,
    ModelDownloadStarted,
    ModelPullStarted,
    PullStarted,
    event_to_dict,
)
from sparkdeck.launch.listener import LaunchListener
from sparkdeck.launch.lock_holder import Busy, UnknownPreset
from sparkdeck.launch.plan import LaunchFlow, LaunchPlan, flush_policy
from sparkdeck.launch.stop_countdown import DEFAULT_GRACE_S
from sparkdeck.runtime.pull import PullProgress, PullTracker
from sparkdeck.service.guarding import GuardFollower
from sparkdeck.service.hub import EventHub

if TYPE_CHECKING:
    from sparkdeck.runtime.client import DockerRuntime
    from sparkdeck.runtime.state import EngineState


class EngineOwner:
    def __init__(
        self,
        hub: EventHub,
        guard: GuardSettings,
        runtime: Callable[[], DockerRuntime],
        health: Callable[[EngineState], bool] | None = None,
    ) -> None:
        self.hub = hub
        self.guard = guard
        self._runtime = runtime
        self._busy_lock = threading.Lock()
        self._busy: str | None = None  # what is in flight: "a launch of X", "a stop"
        self._failed: str | None = None  # the preset whose launch failed, until the next one
        self._launching_id: str | None = None
        self._cancel: threading.Event | None = None
        self._skip: threading.Event | None = None  # the launch in flight's "skip the wait"
        # (launch id, preset id) of the launch in flight: the endpoint queues requests behind
        # it, whoever asked for it (a window, the CLI, a request); cleared before its result
        # is published, so a reader that sees it set will see that result
        self.in_flight: tuple[int, str] | None = None
        self._ids = itertools.count(1)
        self._plans: dict[str, LaunchPlan] = {}
        self.postmortem: dict[str, Any] | None = None  # of the run before, if it ended badly
        # the OpenAI endpoint's own state, set by the server: {"on", "address", "url" |
        # "error", "fix"}; front ends report it rather than probe whoever holds the port
        self.endpoint: dict[str, Any] = {"on": False, "error": "not started"}
        # what a launch runs before it stops the engine: the endpoint's wait for the replies
        # it streams from it (set by the endpoint, which exists only in the service)
        self.before_stop: BeforeStop | None = None
        self.follower = GuardFollower(
            hub, guard, runtime, health or _healthy, launching=lambda: self._launching_id
        )

    def start(self) -> None:
        self.follower.start()

    def close(self) -> None:
        if self._cancel is not None:
            self._cancel.set()
        self.follower.close()

    # ----- reading -------------------------------------------------------------------------

    def status(self) -> dict[str, Any]:
        engine, error = None, None
        try:
            current = self._runtime().current()
            engine = current.to_dict() if current is not None else None
        except Exception as exc:  # noqa: BLE001 - shown, not raised: status always answers
            error = str(exc)
        return {
            "engine": engine,
            "docker_error": error,
            "busy": self._busy,
            "postmortem": self.postmortem,
            "endpoint": self.endpoint,
            # where this service reads presets and settings and keeps its records: a
            # front end of other dirs is told so (sparkdeck.service.client.other_dirs)
            "dirs": {"config": str(paths.config_dir()), "data": str(paths.data_dir())},
            "guard": self.follower.describe(),
            "ready": self.follower.ready,
            "latest": {
                kind: event.to_dict()
                for kind, event in self.hub.latest.items()
                if kind in ("telemetry", "metrics", "launch-result", "engine")
            },
        }

    def engine_text(self) -> str | None:
        """The engine's state in a few words, for the flight recorder's rows."""
        engine = self.follower.engine
        if self._busy is not None:
            return self._busy
        if engine is None:  # a failed launch is named as one, not left as "a launch of X"
            return f"{self._failed} launch failed" if self._failed else None
        return f"{engine.preset_id or engine.name} {'ready' if self.follower.ready else 'starting'}"

    def plan(self, preset_id: str, flush: bool | None) -> dict[str, Any]:
        plan = self._flow(flush).plan(self._preset(preset_id))
        self._plans[preset_id] = plan
        return {
            "preset": preset_id,
            "lines": plan.lines(),
            "is_switch": plan.is_switch,
            "stopping": [e.to_dict() for e in plan.stopping if e.alive],
            "fit": plan.fit.to_dict() if plan.fit is not None else None,
            "fit_lines": plan.fit.lines() if plan.fit is not None else [],
            "fit_error": plan.fit_error,
        }

    # ----- acting --------------------------------------------------------------------------

    def launch(
        self,
        preset_id: str,
        *,
        flush: bool | None = None,
        force: bool = False,
        timeout: float | None = None,
        skip_switch_wait: bool = False,
    ) -> int:
        """Start a launch in a thread and return its id; Busy while one is in flight."""
        preset = self._preset(preset_id)
        self._claim(f"a launch of {preset_id}")
        launch_id = next(self._ids)
        # in flight from the claim on, its plan included: requests that reach the endpoint
        # while the plan is made queue behind the launch instead of going to the engine it
        # is about to stop
        self.in_flight = (launch_id, preset_id)
        self._cancel = cancel = threading.Event()
        self._skip = skip = threading.Event()
        if skip_switch_wait:
            skip.set()
        flow = self._flow(flush)
        plan = self._plans.pop(preset_id, None)
        if plan is None or plan.flush != flush_policy(flush)[0]:
            try:
                plan = flow.plan(preset)
            except BaseException:
                self.in_flight = None  # no launch-result follows: the caller gets the error
                self._release()
                raise
        threading.Thread(
            target=self._run_launch,
            name=f"launch {preset_id}",
            daemon=True,
            args=(launch_id, flow, plan, cancel, skip, force, timeout),
        ).start()
        return launch_id

    def cancel_launch(self) -> bool:
        """Cancel the launch in flight; False when none is. The sequence honours it between
        its steps (never creating the container after it) and at once in the wait for the
        stopped engine's memory, which it ends; a graceful stop already under way finishes."""
        cancel, skip = self._cancel, self._skip
        if cancel is None or self._busy is None:
            return False
        cancel.set()
        if skip is not None:
            skip.set()
        return True

    def skip_switch_wait(self) -> bool:
        """End the launch in flight's wait for the stopped engine's memory now (the user
        chose to go on at a risk, as the in-process wait screen's skip does)."""
        skip = self._skip
        if skip is None or self._busy is None:
            return False
        skip.set()
        return True

    def stop(self, grace: float = DEFAULT_GRACE_S) -> list[dict[str, Any]]:
        """Stop sparkdeck's engines with `grace` seconds between SIGTERM and SIGKILL. Each
        step goes to every client as a `stop-event` (the typed event, as a launch's), and
        the end as one `stop-result`, so a front end shows the countdown it shows for a stop
        it runs itself."""
        self._claim("a stop")
        stopped: list[EngineState] = []
        try:
            stopped = LaunchFlow(self._runtime, guard=self.guard, stop_grace=grace).stop(
                lambda event: self.hub.publish("stop-event", event=event_to_dict(event))
            )
        finally:
            self._release()
            self.hub.publish("stop-result", stopped=[e.to_dict() for e in stopped])
        for engine in stopped:
            self.hub.publish(
                "engine", state="stopped", name=engine.name, preset_id=engine.preset_id
            )
        return [e.to_dict() for e in stopped]

    # ----- inside -------------------------------------------------------------------------

    def _run_launch(
        self,
        launch_id: int,
        flow: LaunchFlow,
        plan: LaunchPlan,
        cancel: threading.Event,
        skip: threading.Event,
        force: bool,
        timeout: float | None,
    ) -> None:
        on_event = _LaunchRelay(self, launch_id)

        result: dict[str, Any] = {"launch": launch_id, "preset": plan.preset.id, "ok": False}
        try:
            engine = flow.run(
                plan, on_event, cancel, force=force, skip_switch_wait=skip, timeout=timeout
            )
            result.update(ok=True, engine=engine.to_dict())
            self._failed = None
        except Exception as exc:  # noqa: BLE001 - every failure is reported to the clients
            self._failed = plan.preset.id
            result.update(
                error=str(exc) or type(exc).__name__,
                error_type=type(exc).__name__,
                log_tail=list(getattr(exc, "log_tail", ())),
            )
        finally:
            self._launching_id = None
            self._cancel = self._skip = None
            self.in_flight = None
            self._release()
            self.follower.wake()  # the engine it started is the follower's from now on
            self.hub.publish("launch-result", **result)

    def _flow(self, flush: bool | None) -> LaunchFlow:
        return LaunchFlow(
            self._runtime, flush=flush, guard=self.guard, before_stop=self.before_stop
        )

    def _preset(self, preset_id: str):
        catalog = load_catalog()
        try:
            return catalog.get(preset_id)
        except KeyError as exc:
            broken = [str(p) for p in catalog.problems if p.path.stem == preset_id]
            raise UnknownPreset("\n".join([exc.args[0], *broken])) from None

    def _claim(self, what: str) -> None:
        with self._busy_lock:
            if self._busy is not None:
                raise Busy(
                    f"{self._busy} is in progress in the service; wait for it to "
                    "finish (or cancel it) first"
                )
            self._busy = what

    def _release(self) -> None:
        with self._busy_lock:
            self._busy = None


class _LaunchRelay(LaunchListener):
    """The service's sink for one launch's events: each goes to every client as itself
    (`launch-event`). A pull's progress, which Docker reports many times a second per layer,
    goes on only when the whole pull's share done moves by a percent, and a download's
    likewise: a client's tracker still adds up every layer it is sent."""

    def __init__(self, owner: EngineOwner, launch_id: int) -> None:
        self.owner, self.launch_id = owner, launch_id
        self.tracker, self.percent = PullTracker(), -1  # the pull's layers added up

    def __call__(self, event: LaunchEvent) -> None:
        event.deliver(self)

    def pull_started(self, event: PullStarted) -> None:
        self._pull_begins()
        self.other(event)

    def model_pull_started(self, event: ModelPullStarted) -> None:
        self._pull_begins()
        self.other(event)

    def model_download_started(self, event: ModelDownloadStarted) -> None:
        self._pull_begins()
        self.other(event)

    def pull_progress(self, event: PullProgress) -> None:
        self.tracker.update(event)
        if self._moved(self.tracker.fraction) or event.status not in ("Downloading", "Extracting"):
            self.other(event)

    def model_downloading(self, event: ModelDownloading) -> None:
        if self._moved(event.fraction):
            self.other(event)

    def _pull_begins(self) -> None:
        self.tracker.reset()
        self.percent = -1

    def _moved(self, fraction: float | None) -> bool:
        if fraction is None or int(fraction * 100) == self.percent:
            return fraction is None and self.percent == -1  # the first, share unknown
        self.percent = int(fraction * 100)
        return True

    def container_started(self, event: ContainerStarted) -> None:
        # the launch's own start-up watchdog guards it until ready; the follower after that
        self.owner._launching_id = event.engine.container_id
        self.other(event)

    def other(self, event: LaunchEvent) -> None:
        self.owner.hub.publish("launch-event", launch=self.launch_id, event=event_to_dict(event))


def _healthy(engine: EngineState) -> bool:
    return engine.docker_state == "running" and answers(engine.base_url + engine.health_path)
