"""Waiting for a stopped engine's memory to come back before the next one starts.

On a Spark, unified memory can take a minute or more to return after a container is killed;
starting the next engine before that is a classic way to wedge the host. A stop measures
what the engine held (guard.own_memory) and either waits here at once (the safe switch) or
leaves a "returning" record that the next launch waits on (`sparkdeck stop`, then a launch
seconds later).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Collection, Sequence

from sparkdeck.guard import own_memory, records
from sparkdeck.guard.claims import GIB
from sparkdeck.guard.switch import HostSample, SwitchProgress, SwitchWaiter, returned_view
from sparkdeck.host.engine_memory import live_pids
from sparkdeck.host.meminfo import MemorySnapshot
from sparkdeck.launch.events import EventSink, SwitchWaited


def still_returning(switch_timeout_s: float) -> list[records.Returning]:
    """Returning records of stops recent enough that their memory may still come back;
    older ones are dropped (after the switch timeout a wait would end at once)."""
    pending = []
    for returning in records.load_returning():
        if time.time() - returning.stopped_at < switch_timeout_s:
            pending.append(returning)
        else:
            records.clear_returning(returning.container_id)
    return pending


def coming_back(
    running: Sequence[own_memory.Measured], available: int, switch_timeout_s: float
) -> tuple[int, list[str]]:
    """What will come back before a new engine starts, and from where: what the running
    engines hold themselves (`running`, measured now: the switch stops them), and what of
    the engines stopped earlier has not shown up yet. Never a MemAvailable delta, which
    would count any other process's memory as an engine's."""
    returning = sum(measured.held for measured in running)
    sources = [measured.describe() for measured in running]
    now = own_memory.host_sample(available)
    for pending in still_returning(switch_timeout_s):
        coming = own_memory.still_coming(pending, now)
        returning += coming
        sources.append(own_memory.describe_returning(pending, coming))
    return returning, sources


def wait_for_memory(
    returning: records.Returning,
    timeout: float,
    skip: threading.Event | None,
    *,
    read_memory: Callable[[], MemorySnapshot],
    gpu_pids: Callable[[], Collection[int] | None],
    margin_gib: float,
    on_event: EventSink,
) -> SwitchProgress:
    """Wait until MemAvailable has risen by what the engine held (net of what others
    took or freed since the stop), its processes are gone from /proc and NVML."""
    at_stop = HostSample(returning.available_at_stop, returning.anon_shmem_at_stop)

    def available() -> int:
        now = own_memory.host_sample(read_memory().available)
        return returned_view(at_stop, now, returning.cpu_held)

    return SwitchWaiter(available, gpu_pids, read_live_pids=live_pids).wait(
        baseline=returning.available_at_stop + returning.held,
        margin=int(margin_gib * GIB),
        timeout=timeout,
        old_pids=returning.pids,
        skip=skip,
        on_progress=lambda p: on_event(SwitchWaited(returning.label, p)),
    )
