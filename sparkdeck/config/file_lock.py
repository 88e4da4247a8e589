"""Locks between sparkdeck processes: one launch at a time, one writer of a shared file.

A lock is `fcntl.flock` on a file in the data dir. The kernel drops it when the holder's file
descriptor closes, so a holder killed with SIGKILL never leaves a stale lock behind (a PID
file would). The holder writes who it is (PID, what it does, since when) into the lock file,
so a process that finds the lock taken can tell the user what is in progress.
"""

from __future__ import annotations

import fcntl
import json
import os
import time
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType

from sparkdeck.config import paths


class LockBusy(Exception):
    """Another process holds the lock; `holder` says who, when it could be read."""

    def __init__(self, message: str, holder: LockHolder | None):
        super().__init__(message)
        self.holder = holder


@dataclass(frozen=True)
class LockHolder:
    pid: int
    what: str  # e.g. "launch vllm-ngc"
    since: float  # wall clock

    def describe(self) -> str:
        age = max(time.time() - self.since, 0.0)
        return f"{self.what} (process {self.pid}, for {age:.0f} s)"


def lock_path(name: str) -> Path:
    return paths.data_dir() / "locks" / f"{name}.lock"


class FileLock:
    """An exclusive inter-process lock named `name` (a file under the data dir's locks/)."""

    def __init__(self, name: str, what: str = ""):
        self.name = name
        self.what = what or name
        self.path = lock_path(name)
        self._fd: int | None = None

    @property
    def held(self) -> bool:
        return self._fd is not None

    def holder(self) -> LockHolder | None:
        """Who holds (or last held) the lock, as it wrote itself down; None if unreadable."""
        try:
            data = json.loads(self.path.read_text(encoding="utf-8"))
            return LockHolder(int(data["pid"]), str(data["what"]), float(data["since"]))
        except (OSError, ValueError, TypeError, KeyError):
            return None

    def held_by(self) -> int | None:
        """The process that holds the lock now, as /proc/locks lists it, found without
        taking the lock even for a moment (a process taking it just then would find it
        taken, and the release erases the holder's name). None when nobody holds it, or
        where /proc/locks does not name the file (another filesystem's inode numbers)."""
        try:
            info = os.stat(self.path)
            with open("/proc/locks", encoding="ascii", errors="replace") as f:
                table = f.read()
        except OSError:  # no lock file: never held
            return None
        where = f"{os.major(info.st_dev):02x}:{os.minor(info.st_dev):02x}:{info.st_ino}"
        # "1: FLOCK  ADVISORY  WRITE <pid> <maj:min:inode> 0 EOF"; waiters have "->" after
        # "1:" and so one field more before the pid: they hold nothing
        for fields in (line.split() for line in table.splitlines()):
            if len(fields) > 5 and fields[1] == "FLOCK" and fields[5] == where:
                return int(fields[4])
        return None

    def acquire(
        self, blocking: bool = True, timeout: float | None = None, poll_s: float = 0.05
    ) -> bool:
        """Take the lock. Non-blocking (or once `timeout` passes): False when it is taken."""
        if self._fd is not None:
            raise RuntimeError(f"lock {self.name} is already held by this object")
        paths.ensure_dir(self.path.parent)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if not blocking or (deadline is not None and time.monotonic() >= deadline):
                    os.close(fd)
                    return False
                time.sleep(poll_s)
        self._fd = fd
        # Who holds it, for the message the next process shows (written in place: readers
        # that catch a half-written file just see "unknown holder").
        os.ftruncate(fd, 0)
        os.pwrite(
            fd,
            json.dumps({"pid": os.getpid(), "what": self.what, "since": time.time()}).encode(),
            0,
        )
        return True

    def acquire_or_raise(self, timeout: float | None = 0.0) -> FileLock:
        """Take the lock or raise LockBusy saying what holds it (timeout 0: do not wait)."""
        if not self.acquire(blocking=bool(timeout), timeout=timeout):
            holder = self.holder()
            who = holder.describe() if holder else "another sparkdeck process"
            raise LockBusy(f"{who} is in progress; wait for it to finish or stop it first", holder)
        return self

    def release(self) -> None:
        fd, self._fd = self._fd, None
        if fd is not None:
            os.ftruncate(fd, 0)  # a process that finds the lock taken never reads our name
            fcntl.flock(fd, fcntl.LOCK_UN)
            os.close(fd)

    def __enter__(self) -> FileLock:
        if self._fd is None:
            self.acquire()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.release()
