"""A process paused for a block (SIGSTOP, then SIGCONT whatever happened), and how the kernel
sees a process: for the tests of a service that stops answering."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterator
from contextlib import contextmanager

from tests.support.cli import wait_for


@contextmanager
def stopped(pid: int) -> Iterator[float]:
    """SIGSTOP `pid` for the block (the moment it was sent); SIGCONT after, whatever
    happened. The block begins once every thread of it has stopped: kill() returns before
    that, and on a loaded machine a stopped dockerd answered requests for a few ms more (5
    of 12 tries beside a 3-process CPU hog), which a test took for the daemon answering."""
    os.kill(pid, signal.SIGSTOP)
    sent = time.monotonic()
    try:
        until_stopped(pid)
        yield sent
    finally:
        os.kill(pid, signal.SIGCONT)


def until_stopped(pid: int) -> None:
    """Wait until the SIGSTOP sent to `pid` has stopped every thread of it."""
    wait_for(lambda: all_stopped(pid), timeout=5, what="the kernel stopping it", every=0.005)


def all_stopped(pid: int) -> bool:
    """Every thread of `pid` is stopped (or has ended)."""
    states = []
    for task in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{task}/stat") as stat:
                states.append(stat.read().rsplit(")", 1)[1].split()[0])
        except OSError:
            continue  # a thread that ended meanwhile
    return all(state in "TZX" for state in states)


def state_of(pid: int) -> str:
    with open(f"/proc/{pid}/stat") as stat:
        return stat.read().rsplit(")", 1)[1].split()[0]
