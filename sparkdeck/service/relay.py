"""A front end that watches the service's guard instead of running a watchdog of its own.

When the service runs, it guards the engine; a second watchdog in a window would only decide
twice and stop twice. `relay_guard` follows the service's event stream and hands each guard
decision, stop attempt and guard stop to the front end's callbacks, until `done` is set or the
stream ends (the service went away: the caller then guards the engine itself again).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass

from sparkdeck.service.client import ServiceClient
from sparkdeck.service.errors import ServiceError


@dataclass(frozen=True)
class RemoteDecision:
    """One of the service watchdog's decisions, as a front end shows it."""

    level: str  # ok, warn, stop
    text: str
    reasons: tuple[str, ...]


def relay_guard(client: ServiceClient, done: threading.Event,
                on_decision: Callable[[RemoteDecision], None],
                on_attempt: Callable[[bool, str, int], None],
                on_stopped: Callable[[str], None]) -> bool:
    """Relay until `done` (True) or the stream ends or fails (False). The service sends a
    telemetry event every second, so `done` is seen within about a second."""
    try:
        with client.events() as events:
            for kind, data in events:
                if done.is_set():
                    return True
                if kind == "guard":
                    on_decision(RemoteDecision(data["level"], data["text"],
                                               tuple(data.get("reasons", ()))))
                elif kind == "stop-attempt":
                    on_attempt(bool(data["done"]), str(data["text"]), int(data["killed"]))
                elif kind == "engine" and data.get("state") == "stopped by the guard":
                    on_stopped("; ".join(data.get("reasons", ())))
    except Exception:  # noqa: BLE001 - the stream broke (httpx, JSON): the service went away
        pass
    return done.is_set()


def hand_over() -> str | None:
    """After a window closes: when a sparkdeck engine runs and no service does, start the
    service so the engine stays guarded. What was done, for the user; None when nothing was
    needed (or the service is turned off)."""
    from sparkdeck.runtime import current_engine
    from sparkdeck.service import location
    from sparkdeck.service.client import ensure_running

    if not location.enabled():
        return None
    _, engine = current_engine()
    if engine is None or not engine.alive:
        return None
    try:
        client, started = ensure_running()
    except ServiceError as exc:
        return (f"{engine.preset_id or engine.name} keeps running UNGUARDED: the sparkdeck "
                f"service did not start ({exc})")
    with client:
        pid = client.status()["pid"]
    if not started:
        return None
    return (f"{engine.preset_id or engine.name} keeps running: handed to the sparkdeck "
            f"service (process {pid}), which guards its memory from now on")
