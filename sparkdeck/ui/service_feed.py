"""What the sparkdeck service already reads, followed from its event stream: a window that
finds the service renders these instead of reading the machine, Docker and the engine's
metrics a second time.

The service samples the machine's telemetry (1 Hz, 2 Hz while an engine starts), follows
Docker for the guard (sparkdeck.service.guarding publishes Docker's word on the engine as a
`docker` event whenever it changes) and samples the ready engine's metrics at 1 Hz
(sparkdeck.service.engine_metrics). ServiceFeed follows the service's event stream for just
those kinds (the latest of each comes first) in a thread of its own and keeps the newest
of each as frozen values, decoded into the types the window's own readers return. While it is
not `live` (no service, the service switched off, stopped or not answering: a keep-alive
comes every second and SILENCE_S without a byte ends the stream), the window reads for
itself: FedTelemetry samples the machine, the engine watch asks Docker (ui.engine_watch),
the metrics tab scrapes the engine (ui.metrics.fed_metrics).

Nothing here imports Textual: the machine tab's worker and the engine watch call it.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from sparkdeck.service import location
from sparkdeck.service.guard_events import GUARD_KINDS

if TYPE_CHECKING:
    from sparkdeck.metrics.snapshot import EngineMetrics
    from sparkdeck.runtime.state import EngineState
    from sparkdeck.service.client import ServiceClient
    from sparkdeck.telemetry.sampler import History, Series, TelemetrySampler, TelemetrySnapshot

KINDS = ("telemetry", "docker", "metrics")
SILENCE_S = 2.0  # liveness.HEARTBEAT_S: a keep-alive comes every second (api.PING_S)
RETRY_S = 2.0  # how often a window without a live feed looks for the service again
LATE_S = 1.0  # telemetry this late after the period, and the window samples for itself


@dataclass(frozen=True)
class DockerWord:
    """The service's latest word from Docker: sparkdeck's engine (None: there is none) and
    whether the guard's health check found it ready; or why Docker could not be asked."""

    engine: EngineState | None
    healthy: bool = False
    error: str | None = None
    not_answering: bool = False


def _connect() -> ServiceClient | None:
    """The running service's client, or None (none runs, its socket is absent, it speaks
    another API version, or it is switched off): never starts one. The HTTP client loads
    with the first socket found: a window without a service never loads httpx (its RSS,
    tests/integration/test_ui_idle_imports.py)."""
    if not location.enabled():
        return None
    try:
        path = location.socket_path()
    except ValueError:
        return None
    if not path.exists():
        return None
    from sparkdeck.service.client import ServiceClient

    return ServiceClient(path, timeout=SILENCE_S)


class ServiceFeed:
    """The service's telemetry and Docker word, followed in a thread (see the module)."""

    def __init__(self, connect: Callable[[], ServiceClient | None] = _connect) -> None:
        self._connect = connect
        self._closed = threading.Event()
        self._arrived = threading.Condition()
        self._telemetry: TelemetrySnapshot | None = None
        self.telemetry_count = 0  # telemetry events decoded so far (a new one: a new sample)
        self.docker: DockerWord | None = None  # None: not live, or no word from Docker yet
        self._metrics: tuple[str, EngineMetrics] | None = None  # (container id, reading)
        self.metrics_count = 0
        self._metrics_listeners: list[Callable[[], object]] = []
        self._telemetry_listeners: list[Callable[[int, TelemetrySnapshot], object]] = []
        self.live = False
        self._listeners: list[Callable[[], object]] = []
        self._guard_readers: list[Callable[[str, dict[str, Any]], None]] = []
        self._ended_count = 0  # the streams that ended (a relay on one ends with it)
        self._stream_ended = threading.Condition()
        self._heard_at = 0.0  # time.monotonic() of the stream's latest event or keep-alive
        self._thread: threading.Thread | None = None
        # set once the first look for the service is over: its latest readings taken, or
        # none found (so a window's first reading is not one it need not have made)
        self._looked = threading.Event()

    def first_look(self, timeout: float = SILENCE_S) -> None:
        """Wait until the first look for the service is over (at most `timeout`)."""
        if self._thread is not None:
            self._looked.wait(timeout)

    def on_change(self, listener: Callable[[], object]) -> None:
        """Call `listener` (from the feed's thread) when the Docker word or `live` changes."""
        self._listeners.append(listener)

    def watch_telemetry(
        self, listener: Callable[[int, TelemetrySnapshot], object]
    ) -> Callable[[], None]:
        """Call `listener(count, snapshot)` (from the feed's thread) at each telemetry
        sample; returns what ends that."""
        self._telemetry_listeners.append(listener)
        return lambda: self._telemetry_listeners.remove(listener)

    def watch_metrics(self, listener: Callable[[], object]) -> Callable[[], None]:
        """Call `listener` (from the feed's thread) at each metrics reading; returns what
        ends that."""
        self._metrics_listeners.append(listener)
        return lambda: self._metrics_listeners.remove(listener)

    def relay_guard(
        self, handle: Callable[[str, dict[str, Any]], None], done: threading.Event, silence_s: float
    ) -> bool | None:
        """The window's guard relay (service.relay.FrontGuard) rides on this feed's stream:
        `handle(kind, data)` gets each of the guard's events, from the feed's thread, until
        `done` (True) or the stream ends or nothing at all has come on it for `silence_s`
        (False); None at once when the feed is not live. One stream and one thread read the
        service's events: a relay's own stream woke a thread of its own several times a
        second. The guard's kinds are never replayed (an earlier engine's stop is no news
        about this one). The caller's thread sleeps meanwhile, woken when the stream ends and
        about once a second to see whether it has gone silent or `done` is set."""
        if not self.live:
            return None
        ended = self._ended_count
        self._guard_readers.append(handle)
        try:
            with self._stream_ended:  # (its wait lets go of the lock)
                while not done.is_set():
                    left = self._heard_at + silence_s - time.monotonic()
                    if left <= 0 or self._ended_count != ended or self._closed.is_set():
                        return False  # ended, or silent: the relay asks the heartbeat why
                    # a broken stream (a killed service) wakes it at once; `done` is seen
                    # within a second
                    self._stream_ended.wait(min(left, 1.0))
            return True
        finally:
            self._guard_readers.remove(handle)

    def metrics_after(self, count: int, container_id: str) -> tuple[int, EngineMetrics] | None:
        """The service's newest metrics reading of the engine `container_id`, when it is
        newer than the `count`-th (and the feed is live); else None, at once."""
        latest, now = self._metrics, self.metrics_count
        if not self.live or latest is None or now <= count or latest[0] != container_id:
            return None
        return now, latest[1]

    def start(self) -> None:
        self._thread = threading.Thread(target=self._follow, name="service feed", daemon=True)
        self._thread.start()

    def close(self) -> None:
        self._closed.set()
        self._looked.set()
        self._ended()
        with self._arrived:
            self._arrived.notify_all()

    def telemetry_after(self, count: int, timeout: float) -> tuple[int, TelemetrySnapshot] | None:
        """The newest telemetry once it is newer than the `count`-th, waiting up to
        `timeout`; None when none came (or the feed is not live)."""
        with self._arrived:
            self._arrived.wait_for(
                lambda: self.telemetry_count > count or not self.live or self._closed.is_set(),
                timeout,
            )
            if self.live and self.telemetry_count > count and self._telemetry is not None:
                return self.telemetry_count, self._telemetry
            return None

    def _follow(self) -> None:
        if not location.enabled():
            self._looked.set()
            return  # SPARKDECK_SERVICE=off: no service to follow, ever
        while not self._closed.is_set():
            client = self._connect()
            if client is None:
                self._looked.set()
            if client is not None:
                try:
                    with (
                        client,
                        client.events(
                            read_timeout=SILENCE_S, kinds=KINDS + GUARD_KINDS, replay=KINDS
                        ) as events,
                    ):
                        for kind, data in events:
                            if self._closed.is_set():
                                break
                            self._heard_at = time.monotonic()
                            if kind in GUARD_KINDS:
                                self._hand_to_guard(kind, data)
                            self._take(kind, data)
                except Exception:  # noqa: BLE001 - gone, silent, another version: read ourselves
                    pass
                self._set(live=False, docker=None)
                self._ended()
                self._looked.set()
            self._closed.wait(RETRY_S)

    def _take(self, kind: str, data: dict[str, Any]) -> None:
        from sparkdeck.launch.wire import decode

        if kind == "hello":
            self._set(live=True, docker=self.docker)
            return
        if kind == "telemetry":
            from sparkdeck.telemetry.sampler import TelemetrySnapshot

            snapshot = decode(TelemetrySnapshot, data)
            with self._arrived:
                self._telemetry = snapshot
                self.telemetry_count += 1
                count = self.telemetry_count
                self._arrived.notify_all()
            for telemetry_listener in list(self._telemetry_listeners):
                telemetry_listener(count, snapshot)
        elif kind == "metrics":
            from sparkdeck.metrics.snapshot import EngineMetrics

            reading = decode(EngineMetrics, data["reading"])
            self._metrics = (str(data.get("container_id")), reading)
            self.metrics_count += 1
            for listener in list(self._metrics_listeners):
                listener()
        elif kind == "docker":
            from sparkdeck.runtime.state import EngineState

            engine = data.get("engine")
            word = DockerWord(
                decode(EngineState, engine) if engine is not None else None,
                bool(data.get("healthy")),
                data.get("error"),
                bool(data.get("not_answering")),
            )
            self._set(live=self.live, docker=word)
        self._looked.set()  # the latest readings come first: the first look is over

    def _ended(self) -> None:
        with self._stream_ended:
            self._ended_count += 1
            self._stream_ended.notify_all()

    def _hand_to_guard(self, kind: str, data: dict[str, Any]) -> None:
        for handle in list(self._guard_readers):
            try:
                handle(kind, data)
            except Exception:  # noqa: BLE001 - a malformed event must not end the feed
                pass

    def _set(self, live: bool, docker: DockerWord | None) -> None:
        changed = live != self.live or docker != self.docker
        with self._arrived:
            self.live, self.docker = live, docker
            self._arrived.notify_all()
        if changed:
            for listener in self._listeners:
                listener()


class FedTelemetry:
    """The machine tab's sampling loop (TelemetrySampler.run's shape): the service's samples
    while the feed is live, the window's own sampler while it is not or they come late.

    The service's samples are handed on from the feed's own thread as they arrive: no thread
    of ours wakes for each (a wake-up costs an idle process about a millisecond); this loop
    looks only every period and LATE_S whether one came."""

    def __init__(self, sampler: TelemetrySampler, feed: ServiceFeed | None) -> None:
        self.sampler, self.feed = sampler, feed
        self._seen = 0  # the feed's count of the last sample handed on (shared by loops)
        self._lock = threading.Lock()  # the feed's thread and a loop's both add to history
        self.own_samples = 0  # samples read by this window itself

    def run(
        self,
        history: History,
        period: Callable[[], float],
        emit: Callable[[TelemetrySnapshot, dict[str, Series]], object],
        stop: threading.Event,
        keep_going: Callable[[], bool] = lambda: True,
    ) -> None:
        feed = self.feed
        if feed is not None:
            feed.first_look()
        missed = False  # the service's samples came late: ours until one comes again
        while not stop.is_set() and keep_going():
            if feed is not None and feed.live and not missed:
                missed = not self._follow(feed, history, period, emit, stop, keep_going)
                continue
            with self._lock:
                snapshot = self.sampler.sample()
                self.own_samples += 1
                history.add(snapshot)
                frozen = history.frozen()
            emit(snapshot, frozen)
            stop.wait(period())
            missed = missed and feed is not None and feed.telemetry_count <= self._seen

    def _follow(
        self,
        feed: ServiceFeed,
        history: History,
        period: Callable[[], float],
        emit: Callable[[TelemetrySnapshot, dict[str, Series]], object],
        stop: threading.Event,
        keep_going: Callable[[], bool],
    ) -> bool:
        """Hand on the service's samples until the feed is not live (True) or a sample is
        late (False), or the loop is stopped."""

        def take(count: int, snapshot: TelemetrySnapshot) -> None:
            with self._lock:
                if count <= self._seen:
                    return  # handed on already (by a loop this one replaced)
                self._seen = count
                history.add(snapshot)
                frozen = history.frozen()
            emit(snapshot, frozen)

        unwatch = feed.watch_telemetry(take)
        try:
            latest = feed.telemetry_after(self._seen, 0)
            if latest is not None:
                take(*latest)
            while feed.live and keep_going():
                seen = self._seen
                if stop.wait(period() + LATE_S):
                    return True
                if self._seen == seen and feed.live:
                    return False
            return True
        finally:
            unwatch()
