"""The machine's clock ticks that sparkdeck's periodic loops wake on.

The service samples the machine's telemetry, the engine's metrics and the guard's readings
once a second each, in loops of their own (the guard in its own thread, so that a stalled
event loop cannot stop it). Each loop used to wait its period from its own start, so their
events reached a window at three different moments of each second, and the window drew a
frame for each: an idle window with an engine up spent most of its CPU drawing about three
frames a second where one would show the same (docs/performance.md). Waking on whole
multiples of the period of CLOCK_MONOTONIC instead, which is one clock for every process on
the machine, puts the service's loops and a window's own (when it samples for itself) on
the same instants: their events arrive within milliseconds of each other and are drawn in
one frame. A loop keeps its own rate; only its phase is shared.
"""

from __future__ import annotations

import time


def until_next_tick(period: float, since: float | None = None, now: float | None = None) -> float:
    """Seconds from `now` (time.monotonic() when None) to the next whole multiple of
    `period` on the monotonic clock that is at least half a period after `since` (when the
    loop's last turn began): a loop that starts just before a tick does not run twice within
    milliseconds (two of the guard's readings that close would count as two in a row), and
    one that runs late goes on at the next tick rather than at once."""
    if period <= 0:
        return 0.0
    at = time.monotonic() if now is None else now
    earliest = at if since is None else max(at, since + period / 2)
    return earliest + period - (earliest % period) - at
