"""The safe switch: after an engine stops, wait for its memory to come back.

On a Spark unified memory can take a minute or more to return after a container is killed,
and starting the next engine before that is a classic way to wedge the host. The engine's own
holding is measured just before the stop (sparkdeck.host.engine_memory); memory counts as back
when MemAvailable has risen by that much (within `switch_margin_gib`) since just before the
stop, none of the old engine's processes is left in /proc, and NVML (where it can tell) lists
none of them. What other processes took or freed meanwhile is taken out of the rise (their
AnonPages + Shmem, see `returned_view`), so a process eating memory during the wait does not
make it wait for memory the engine never held. The wait ends there, at the timeout (with a
clear message), or when the user skips it knowingly.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Collection
from dataclasses import dataclass, replace

from sparkdeck.guard.claims import GIB

WAITING, BACK, TIMED_OUT, SKIPPED = "waiting", "memory back", "timed out", "skipped"


@dataclass(frozen=True)
class SwitchProgress:
    """Where the wait stands: the target, what is available now, what NVML still lists."""

    state: str
    elapsed: float
    timeout: float
    target: int  # MemAvailable that counts as back (baseline - margin)
    available: int  # MemAvailable, net of what other processes took or freed since the stop
    gpu_pids_left: tuple[int, ...] | None  # None: NVML cannot tell
    pids_left: tuple[int, ...] = ()  # the old engine's processes still in /proc

    @property
    def done(self) -> bool:
        return self.state != WAITING

    @classmethod
    def from_dict(cls, data: dict) -> SwitchProgress:
        """From dataclasses.asdict after a JSON round trip (the service's launch-switch)."""
        gpu = data.get("gpu_pids_left")
        return cls(
            str(data["state"]),
            float(data["elapsed"]),
            float(data["timeout"]),
            int(data["target"]),
            int(data["available"]),
            None if gpu is None else tuple(int(p) for p in gpu),
            tuple(int(p) for p in data.get("pids_left") or ()),
        )

    def describe(self) -> str:
        gpu = (
            "NVML cannot tell GPU processes"
            if self.gpu_pids_left is None
            else f"{len(self.gpu_pids_left)} GPU process(es) of the old engine left"
        )
        procs = (
            f"{len(self.pids_left)} process(es) of the old engine left, " if self.pids_left else ""
        )
        head = (
            f"MemAvailable {self.available / GIB:.1f} / {self.target / GIB:.1f} GiB, "
            f"{procs}{gpu}, {self.elapsed:.0f}/{self.timeout:.0f} s"
        )
        if self.state == TIMED_OUT:
            return (
                f"memory did not come back within {self.timeout:.0f} s ({head}); going on "
                "is a risk: the next engine may find less memory than it expects"
            )
        if self.state == SKIPPED:
            return f"switch wait skipped by the user ({head})"
        return f"{self.state}: {head}"


def switch_progress(
    *,
    baseline: int,
    margin: int,
    available: int,
    elapsed: float,
    timeout: float,
    gpu_pids_left: Collection[int] | None,
    pids_left: Collection[int] = (),
) -> SwitchProgress:
    """Pure decision: is memory back, still coming, or has the wait run out?

    Memory is never back while a process of the old engine exists: it still holds its memory
    (a process freeing a large heap stays in /proc until it is done)."""
    target = max(baseline - margin, 0)
    pids = None if gpu_pids_left is None else tuple(sorted(gpu_pids_left))
    procs = tuple(sorted(pids_left))
    back = available >= target and not pids and not procs
    state = BACK if back else TIMED_OUT if elapsed >= timeout else WAITING
    return SwitchProgress(state, elapsed, timeout, target, available, pids, procs)


@dataclass(frozen=True)
class HostSample:
    """MemAvailable and the host's AnonPages + Shmem, read together."""

    available: int
    anon_shmem: int


def returned_view(at_stop: HostSample, now: HostSample, engine_cpu_held: int) -> int:
    """MemAvailable now as if other processes had taken and freed nothing since the stop.

    Before the stop the host's AnonPages + Shmem held the engine's cgroup part plus
    everyone else's; once its processes are gone, what is above `at_stop - engine` is what
    others took meanwhile (a hog), and that hid part of the engine's return: add it back.
    Others freeing memory lowers it the same way, so their frees do not end the wait early.
    The engine's GPU part on a Spark is driver memory, outside AnonPages, so it is not here.
    """
    others_delta = now.anon_shmem - (at_stop.anon_shmem - engine_cpu_held)
    return now.available + others_delta


class SwitchWaiter:
    """The wait loop, with its readers, clock and sleep injected (tests run it on replays)."""

    def __init__(
        self,
        read_available: Callable[[], int],
        read_gpu_pids: Callable[[], Collection[int] | None],
        *,
        clock: Callable[[], float] = time.monotonic,
        poll_s: float = 0.5,
        read_live_pids: Callable[[Collection[int]], Collection[int]] | None = None,
    ):
        self.read_available = read_available
        self.read_gpu_pids = read_gpu_pids
        self.read_live_pids = read_live_pids or (lambda pids: ())
        self.clock = clock
        self.poll_s = poll_s

    def wait(
        self,
        *,
        baseline: int,
        margin: int,
        timeout: float,
        old_pids: Collection[int],
        skip: threading.Event | None = None,
        on_progress: Callable[[SwitchProgress], object] | None = None,
    ) -> SwitchProgress:
        skip = skip or threading.Event()
        started = self.clock()
        old = set(old_pids)
        while True:
            listed = self.read_gpu_pids()
            left = None if listed is None else old & set(listed)
            progress = switch_progress(
                baseline=baseline,
                margin=margin,
                available=self.read_available(),
                elapsed=self.clock() - started,
                timeout=timeout,
                gpu_pids_left=left,
                pids_left=old & set(self.read_live_pids(old)),
            )
            if skip.is_set() and not progress.done:
                progress = replace(progress, state=SKIPPED)
            if on_progress is not None:
                on_progress(progress)
            if progress.done:
                return progress
            skip.wait(self.poll_s)  # wakes at once when the user skips
