"""Following one launch that the service runs, for a front end: the CLI prints its lines, a
window moves its engine card and its memory-wait screen.

The event stream is opened (and its hello read) before the launch is asked for, so no event
of this launch can be missed. Only this launch's events are passed on; the others on the
stream (telemetry, another client's doings) are skipped here.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from sparkdeck.service.client import ServiceClient
from sparkdeck.service.errors import ServiceError

ENDED = ("the service ended before the launch did: see `sparkdeck service status` and its "
         "log")


def follow_launch(client: ServiceClient, preset: str, options: dict[str, Any],
                  on_event: Callable[[str, dict[str, Any]], None], *,
                  skip: threading.Event | None = None,
                  on_interrupt: Callable[[], None] | None = None) -> dict[str, Any]:
    """Launch `preset` through the service; each of its events (kind, data) goes to
    `on_event` until the `launch-result`, which is returned ({"ok", "engine" | "error"}).

    `skip`, once set, ends the launch's wait for the stopped engine's memory (asked once,
    at the next event: the stream carries telemetry every second). Ctrl-C asks the service
    to cancel the launch and waits for its outcome (nothing is left behind, as in-process);
    `on_interrupt` says so first. Raises ServiceError when the service refuses the launch
    (one in flight, an unknown preset) or ends before it does.
    """
    with client.events() as events:
        kind, _ = next(events)
        if kind != "hello":
            raise ServiceError(f"the service's event stream began with {kind!r}, not hello")
        launch_id = client.launch(preset, **options)
        skipped = False
        try:
            for kind, data in events:
                if skip is not None and skip.is_set() and not skipped:
                    skipped = True
                    client.skip_switch_wait()
                if data.get("launch") != launch_id:
                    continue
                if kind == "launch-result":
                    return data
                on_event(kind, data)
        except KeyboardInterrupt:
            if on_interrupt is not None:
                on_interrupt()
            client.cancel_launch()
            for kind, data in events:
                if kind == "launch-result" and data.get("launch") == launch_id:
                    return data
    raise ServiceError(ENDED)
