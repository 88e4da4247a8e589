"""A bounded real memory hog: a child process that allocates and touches `size` bytes when
told to, holds them, and frees them (or is killed) after; for the guard's real-memory tests."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

from sparkdeck.config.settings import GuardSettings
from sparkdeck.host.meminfo import read_meminfo

GIB = 2**30

HOG = r"""
import sys
size = int(sys.argv[1])
sys.stdin.readline()
block = bytearray(size)
for i in range(0, size, 4096):  # touch every page: calloc'd pages are not resident yet
    block[i] = 1
print("holding", flush=True)
sys.stdin.readline()
"""


class MemoryHog:
    def __init__(self, size: int):
        self.size = size
        self.child = subprocess.Popen(
            [sys.executable, "-c", HOG, str(size)],
            text=True,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
        )

    def allocate(self) -> None:
        assert self.child.stdin is not None and self.child.stdout is not None
        self.child.stdin.write("go\n")
        self.child.stdin.flush()
        assert self.child.stdout.readline().strip() == "holding"

    def close(self) -> None:
        self.child.kill()
        self.child.wait(timeout=10)

    def __enter__(self) -> MemoryHog:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def stop_line_below_a_hog(config: Path) -> tuple[int, float]:
    """Raise the guard's stop line (settings.toml in `config`) to halfway down a hog's drop:
    today's MemAvailable is above it by half a hog (2 GiB at most), and the hog takes it
    below by as much (other work on a shared box moves it by less). The test never endangers
    the box. The hog's size and the stop line (% of MemTotal, as the guard reads it)."""
    from sparkdeck.host.meminfo import read_meminfo

    memory = read_meminfo()
    hog_size = min(4 * 2**30, memory.available // 5) // 4096 * 4096
    start_pct = 100 * memory.available / memory.total
    # the line as written (2 decimals) is the guard's: a test that judged readings against
    # the unrounded figure was up to 0.005 % of MemTotal off (a reading 254 KB above it
    # was below the guard's line, and the test failed a stop the rule had made)
    stop_pct = round(start_pct - 50 * hog_size / memory.total, 2)
    config.mkdir(parents=True, exist_ok=True)
    (config / "settings.toml").write_text(
        f"[guard]\nstop_available_pct = {stop_pct}\n"
        f"warn_available_pct = {min(stop_pct + 0.5 * (start_pct - stop_pct), 99.0):.2f}\n"
    )
    return hog_size, stop_pct


# A bounded hog in another process: allocates and touches N MiB at once, says so, holds until
# stdin closes (tests/integration/test_engine_memory.py and
# tests/integration/test_switch_own_memory.py).
HELD_HOG = r"""
import sys
block = bytearray(int(sys.argv[1]) * 2**20)
for i in range(0, len(block), 4096):  # touch every page, or it is not resident
    block[i] = 1
print("held", flush=True)
sys.stdin.read()
"""


def start_hog(mib: int) -> subprocess.Popen:
    hog = subprocess.Popen(
        [sys.executable, "-c", HELD_HOG, str(mib)],
        text=True,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
    )
    assert hog.stdout.readline().strip() == "held"
    return hog


def stop_hog(hog: subprocess.Popen) -> None:
    hog.kill()
    hog.wait(timeout=10)


def pcp_free_bytes() -> int:
    """Free pages held on the kernel's per-CPU lists (/proc/zoneinfo `count:`).

    Since Linux 6.7 the lists' size is tuned up while a process frees a lot at once: seen on
    this project's test machines (6.18), ~1.1 GiB freed by the child sat there, free and
    reused by the next allocation, but in neither MemFree nor MemAvailable, for minutes. The
    test adds them back to see the child's own memory; the reader itself is left to report
    what /proc/meminfo says; whether the guard should count these lists is an open question.
    """
    text = Path("/proc/zoneinfo").read_text()
    return sum(int(n) for n in re.findall(r"^\s+count:\s+(\d+)", text, re.M)) * 4096


def guard_in_hog_reach() -> tuple[GuardSettings, int]:
    """Settings whose stop line lies halfway down a hog's drop of MemAvailable, and the
    hog's size: today's figure is above the line by half a hog, the hog takes it below."""
    memory = read_meminfo()
    hog = min(2 * GIB, memory.available // 5) // 4096 * 4096
    start = 100 * memory.available / memory.total
    stop = start - 50 * hog / memory.total
    return GuardSettings(
        stop_available_pct=stop, warn_available_pct=min(stop + 0.5 * (start - stop), 99.0)
    ), hog
