"""The launch lock (LaunchLock) and who holds it, in words, for the refusal a second launch
or stop gets; and the engine owner's two refusals (Busy, UnknownPreset), which the
endpoint's switching names without importing the service.

One launch or stop runs at a time across every sparkdeck process (CLI, TUI, service); the
lock file (sparkdeck.config.file_lock) names its holder. This module turns that name into the
LockBusy a refused caller shows, reading again briefly while a fresh holder writes it.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from contextlib import contextmanager

from sparkdeck.config.file_lock import FileLock, LockBusy

LAUNCH_LOCK = "launch"  # one launch or stop at a time, across every sparkdeck process


class Busy(Exception):
    """A launch or stop is in flight in the engine's owner: the message says which."""


class UnknownPreset(Exception):
    """No preset has that id."""


def process_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process: alive
        return True
    return True


def lock_busy(lock: FileLock, what: str) -> LockBusy:
    """LockBusy saying what holds the launch lock, e.g. "a launch of X by process N"."""
    # The holder writes its name just after taking the lock: until then the file is empty,
    # or still names an earlier holder that was killed. Read again for up to a second.
    holder = lock.holder()
    for _ in range(20):
        if holder is not None and process_alive(holder.pid):
            break
        time.sleep(0.05)
        holder = lock.holder()
    if holder is not None and not process_alive(holder.pid):
        holder = None
    who = (
        f"{holder.what} by process {holder.pid} is in progress (for "
        f"{max(time.time() - holder.since, 0):.0f} s)"
        if holder
        else "a launch or stop by another sparkdeck process is in progress"
    )
    return LockBusy(
        f"{who}; {what} was not started and nothing was touched. Wait for it to "
        "finish, or interrupt it (Ctrl-C in its terminal)",
        holder,
    )


class LaunchLock:
    """The launch lock as one launcher holds it: `held(what)` takes it for `what` ("a launch
    of X", "a stop"), so that one launch or stop runs at a time across every sparkdeck
    process (CLI, TUI, service). LockBusy names the holder; nothing has been touched then.
    Re-entrant: a launch's own stop runs under the lock the launch holds."""

    def __init__(self) -> None:
        self._held: FileLock | None = None

    @contextmanager
    def held(self, what: str) -> Iterator[None]:
        if self._held is not None:
            yield
            return
        lock = FileLock(LAUNCH_LOCK, what)
        if not lock.acquire(blocking=False):
            raise lock_busy(lock, what)
        self._held = lock
        try:
            yield
        finally:
            self._held = None
            lock.release()
