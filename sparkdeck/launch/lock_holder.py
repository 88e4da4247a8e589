"""Who holds the launch lock, in words, for the refusal a second launch or stop gets; and
the engine owner's two refusals (Busy, UnknownPreset), which the endpoint's switching
names without importing the service.

One launch or stop runs at a time across every sparkdeck process (CLI, TUI, service); the
lock file (sparkdeck.config.file_lock) names its holder. This module turns that name into the
LockBusy a refused caller shows, reading again briefly while a fresh holder writes it.
"""

from __future__ import annotations

import os
import time

from sparkdeck.config.file_lock import FileLock, LockBusy


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
