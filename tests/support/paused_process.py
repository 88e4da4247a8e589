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
    happened."""
    os.kill(pid, signal.SIGSTOP)
    sent = time.monotonic()
    try:
        wait_for(lambda: state_of(pid) == "T", timeout=5, what="the kernel stopping it", every=0.01)
        yield sent
    finally:
        os.kill(pid, signal.SIGCONT)


def state_of(pid: int) -> str:
    with open(f"/proc/{pid}/stat") as stat:
        return stat.read().rsplit(")", 1)[1].split()[0]
