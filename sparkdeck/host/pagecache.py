"""Dropping the page cache before a launch.

Page cache counts as "available", yet vLLM's startup check and CUDA allocations on a Spark can
still fail until it is dropped (NVIDIA's playbooks flush before every launch). Writing to
drop_caches needs root: sparkdeck writes it directly as root, else tries `sudo -n` (no
password prompt), else explains how to allow it. It never asks for a password itself.
"""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from sparkdeck.host.meminfo import MemorySnapshot, gib, read_meminfo

DROP_CACHES = Path("/proc/sys/vm/drop_caches")

HOW_TO_ALLOW = (
    "sparkdeck could not drop the page cache: it is not running as root and `sudo -n` is not "
    "allowed without a password. To allow just this one command, run once:\n"
    '  echo "$USER ALL=(root) NOPASSWD: /usr/bin/tee /proc/sys/vm/drop_caches" | '
    "sudo tee /etc/sudoers.d/sparkdeck-drop-caches\n"
    "or launch with --no-flush to go on without flushing (risky on a Spark: allocations can "
    "fail or the host can stall while the cache is large)."
)


class FlushNotPermitted(PermissionError):
    """The page cache could not be dropped; the message says how to allow it."""


@dataclass(frozen=True)
class FlushReport:
    method: str  # "root" or "sudo"
    before: MemorySnapshot
    after: MemorySnapshot
    seconds: float

    def describe(self) -> str:
        return (
            f"page cache flushed ({self.method}, {self.seconds:.1f} s): "
            f"cached {gib(self.before.cached)} -> {gib(self.after.cached)}, "
            f"available {gib(self.before.available)} -> {gib(self.after.available)}"
        )


def can_flush(
    drop_caches: Path = DROP_CACHES, euid: int | None = None, sudo: Sequence[str] = ("sudo", "-n")
) -> bool:
    """Would flush_page_cache be allowed? Checked before a launch stops anything.

    `sudo -n -l CMD` answers whether CMD may run without a password, without running it.
    """
    euid = os.geteuid() if euid is None else euid
    if euid == 0:
        return os.access(drop_caches, os.W_OK)
    try:
        result = subprocess.run(
            [*sudo, "-l", "tee", str(drop_caches)], capture_output=True, timeout=10, check=False
        )
    except (OSError, subprocess.TimeoutExpired):  # no sudo, or not executable for us
        return False
    return result.returncode == 0


def flush_page_cache(
    drop_caches: Path = DROP_CACHES,
    read_memory: Callable[[], MemorySnapshot] = read_meminfo,
    euid: int | None = None,
    sudo: Sequence[str] = ("sudo", "-n"),
) -> FlushReport:
    """Sync, drop the page cache, and report Cached and MemAvailable before and after."""
    euid = os.geteuid() if euid is None else euid
    before = read_memory()
    started = time.monotonic()
    os.sync()  # dirty pages cannot be dropped; write them out first
    if euid == 0:
        try:
            drop_caches.write_text("3\n")
        except OSError as exc:
            raise FlushNotPermitted(
                f"running as root but cannot write {drop_caches}: {exc.strerror} (a container "
                "or a read-only /proc?). Launch with --no-flush to go on without flushing."
            ) from exc
        method = "root"
    else:
        try:
            result = subprocess.run(
                [*sudo, "tee", str(drop_caches)],
                input="3\n",
                capture_output=True,
                text=True,
                timeout=30,
                check=False,
            )
        except (OSError, subprocess.TimeoutExpired):  # no sudo, or not executable for us
            raise FlushNotPermitted(HOW_TO_ALLOW) from None
        if result.returncode != 0:
            raise FlushNotPermitted(HOW_TO_ALLOW)
        method = "sudo"
    return FlushReport(method, before, read_memory(), time.monotonic() - started)
