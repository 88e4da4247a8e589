"""The safe switch: after an engine stops, wait for its memory to come back.

On a Spark unified memory can take a minute or more to return after a container is killed,
and starting the next engine before that is a classic way to wedge the host. Memory counts
as back when MemAvailable is within `switch_margin_gib` of what it was before the old engine
was launched, and NVML (where it can tell) lists none of the old engine's processes. The wait
ends there, at the timeout (with a clear message), or when the user skips it knowingly.
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
    available: int
    gpu_pids_left: tuple[int, ...] | None  # None: NVML cannot tell

    @property
    def done(self) -> bool:
        return self.state != WAITING

    def describe(self) -> str:
        gpu = ("NVML cannot tell GPU processes" if self.gpu_pids_left is None else
               f"{len(self.gpu_pids_left)} GPU process(es) of the old engine left")
        head = (f"MemAvailable {self.available / GIB:.1f} / {self.target / GIB:.1f} GiB, "
                f"{gpu}, {self.elapsed:.0f}/{self.timeout:.0f} s")
        if self.state == TIMED_OUT:
            return (f"memory did not come back within {self.timeout:.0f} s ({head}); going on "
                    "is a risk: the next engine may find less memory than it expects")
        if self.state == SKIPPED:
            return f"switch wait skipped by the user ({head})"
        return f"{self.state}: {head}"


def switch_progress(*, baseline: int, margin: int, available: int, elapsed: float,
                    timeout: float, gpu_pids_left: Collection[int] | None) -> SwitchProgress:
    """Pure decision: is memory back, still coming, or has the wait run out?"""
    target = max(baseline - margin, 0)
    pids = None if gpu_pids_left is None else tuple(sorted(gpu_pids_left))
    back = available >= target and not pids
    state = BACK if back else TIMED_OUT if elapsed >= timeout else WAITING
    return SwitchProgress(state, elapsed, timeout, target, available, pids)


class SwitchWaiter:
    """The wait loop, with its readers, clock and sleep injected (tests run it on replays)."""

    def __init__(self, read_available: Callable[[], int],
                 read_gpu_pids: Callable[[], Collection[int] | None],
                 *, clock: Callable[[], float] = time.monotonic, poll_s: float = 0.5):
        self.read_available = read_available
        self.read_gpu_pids = read_gpu_pids
        self.clock = clock
        self.poll_s = poll_s

    def wait(self, *, baseline: int, margin: int, timeout: float, old_pids: Collection[int],
             skip: threading.Event | None = None,
             on_progress: Callable[[SwitchProgress], None] | None = None) -> SwitchProgress:
        skip = skip or threading.Event()
        started = self.clock()
        old = set(old_pids)
        while True:
            listed = self.read_gpu_pids()
            left = None if listed is None else old & set(listed)
            progress = switch_progress(baseline=baseline, margin=margin,
                                       available=self.read_available(),
                                       elapsed=self.clock() - started, timeout=timeout,
                                       gpu_pids_left=left)
            if skip.is_set() and not progress.done:
                progress = replace(progress, state=SKIPPED)
            if on_progress is not None:
                on_progress(progress)
            if progress.done:
                return progress
            skip.wait(self.poll_s)  # wakes at once when the user skips
