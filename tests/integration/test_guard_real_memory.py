"""Real memory on this machine: a child process allocates and touches memory in steps, and
the guard's readers see MemAvailable fall by about that much and come back once it is freed
(waited for by the safe-switch waiter on the real reader).
Bounded: at most min(1 GiB, 10 % of MemAvailable) held at once, in four steps, each with a
timeout.

Then pressure inside a memory-limited cgroup: the cgroup v1 memory controller caps a child
at 64 MiB, and a cgroup v2 group (the unified hierarchy, which has PSI files per group here)
shows the stall figures respond while the child re-reads a file four times that size.
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from sparkdeck.guard.readings import HostReadings
from sparkdeck.guard.switch import BACK, SwitchWaiter
from sparkdeck.host.psi import read_pressure, stall_rates
from tests.conftest import unavailable
from tests.support.memory_hog import pcp_free_bytes

MIB = 2**20
CHILD = r"""
import sys
step = int(sys.argv[1])
blocks = []
for command in sys.stdin:
    if command.startswith("a"):
        block = bytearray(step)
        for i in range(0, step, 4096):  # touch every page: calloc'd pages are not resident yet
            block[i] = 1
        blocks.append(block)
        del block  # the list holds the only reference, so popping it frees the memory
        print("allocated", flush=True)
    else:
        blocks.pop()
        print("freed", flush=True)
"""


def rss(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS")


def talk(child: subprocess.Popen, command: str, expect: str) -> None:
    child.stdin.write(command + "\n")
    child.stdin.flush()
    line = child.stdout.readline().strip()
    assert line == expect, f"child said {line!r}"


def test_memavailable_follows_a_child_that_allocates_and_frees():
    """The child allocates four steps (up to the cap), then frees them one by one; twice.

    Other helpers' work shares this 2-core machine and takes or frees hundreds of MiB at
    random moments, so the median of the 8 steps each way is compared with the step size: a
    reader that does not follow the child fails, one disturbed step does not. Freed memory
    shows up in MemAvailable a little later here (seen: ~60 % at once, the rest within a
    second), like a Spark's slower return after a container stops, so each free is waited
    for by the safe-switch waiter on the real reader (5 s at most). Free pages parked on the
    kernel's per-CPU lists are counted back in (pcp_free_bytes).
    """
    readings = HostReadings()

    def available() -> int:
        return readings().memory.available + pcp_free_bytes()

    cap = min(1024 * MIB, available() // 10)
    step = (cap // 4) // 4096 * 4096
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD, str(step)],
        text=True,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
    )
    drops, rises, returned = [], [], []
    try:
        for _ in range(2):
            rss_before = rss(child.pid)
            for _ in range(4):
                before = available()
                talk(child, "a", "allocated")
                drops.append(before - available())
            assert rss(child.pid) - rss_before >= 0.95 * 4 * step  # the child really holds it
            for _ in range(4):
                before = available()
                talk(child, "f", "freed")
                progress = SwitchWaiter(available, lambda: None, poll_s=0.1).wait(
                    baseline=before + step, margin=int(0.35 * step), timeout=5.0, old_pids=()
                )
                rises.append(progress.available - before)
                returned.append(progress.state == BACK)
    finally:
        child.kill()
        child.wait(timeout=10)
    shown = (
        f"steps of {step // MIB} MiB; drops {[d // MIB for d in drops]}, "
        f"rises {[r // MIB for r in rises]} MiB"
    )
    assert abs(statistics.median(drops) - step) < 0.35 * step, shown
    assert abs(statistics.median(rises) - step) < 0.35 * step, shown
    assert sum(returned) >= 5, shown


V1_MEMORY = Path("/sys/fs/cgroup/memory")
V2_ROOT = Path("/sys/fs/cgroup/unified")


def own_v1_memory_group() -> Path:
    for line in Path("/proc/self/cgroup").read_text().splitlines():
        _, controllers, path = line.split(":", 2)
        if "memory" in controllers.split(","):
            return V1_MEMORY / path.lstrip("/")
    raise FileNotFoundError("no cgroup v1 memory controller")


@pytest.fixture
def limited_groups() -> Iterator[tuple[Path, Path]]:
    """A 64 MiB v1 memory group under our own, and a v2 group for its PSI; removed after."""
    name = f"sparkdeck-test-{uuid.uuid4().hex[:8]}"
    try:
        v1 = own_v1_memory_group() / name
        v1.mkdir()
    except OSError as exc:
        unavailable(f"cannot create a cgroup v1 memory group here: {exc}")
    v2 = V2_ROOT / name
    try:
        v2.mkdir()
    except OSError as exc:
        v1.rmdir()
        unavailable(f"cannot create a cgroup v2 group for PSI here: {exc}")
    if not (v2 / "memory.pressure").exists():
        v1.rmdir(), v2.rmdir()
        unavailable("this kernel has no per-cgroup memory.pressure")
    (v1 / "memory.limit_in_bytes").write_text(str(64 * MIB))
    yield v1, v2
    for group in (v1, v2):
        for _ in range(50):
            try:
                group.rmdir()
                break
            except OSError:
                import time

                time.sleep(0.1)


THRASH = r"""
import sys, time
path = sys.argv[1]
sys.stdin.readline()
deadline = time.monotonic() + 4.0
while time.monotonic() < deadline:
    with open(path, "rb") as fh:
        while fh.read(1 << 20):
            pass
print("done", flush=True)
"""


def test_pressure_responds_inside_a_memory_limited_cgroup(limited_groups, tmp_path):
    v1, v2 = limited_groups
    big = tmp_path / "big"
    with big.open("wb") as fh:
        for _ in range(256):
            fh.write(os.urandom(MIB))
        fh.flush()
        os.fsync(fh.fileno())
        # out of the cache, or the child's reads hit pages charged to this process's group
        os.posix_fadvise(fh.fileno(), 0, 0, os.POSIX_FADV_DONTNEED)
    child = subprocess.Popen(
        [sys.executable, "-c", THRASH, str(big)],
        text=True,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
    )
    try:
        (v1 / "cgroup.procs").write_text(str(child.pid))
        (v2 / "cgroup.procs").write_text(str(child.pid))
        before = read_pressure(v2 / "memory.pressure")
        child.stdin.write("go\n")
        child.stdin.flush()
        assert child.stdout.readline().strip() == "done"
        after = read_pressure(v2 / "memory.pressure")
        usage_peak = int((v1 / "memory.max_usage_in_bytes").read_text())
    finally:
        child.kill()
        child.wait(timeout=10)
    assert usage_peak <= 64 * MIB  # the limit held: the file could never be cached whole
    rates = stall_rates(before, after)
    assert rates is not None and rates.some_pct > 0.1, rates  # reclaim stalls, seen in PSI
    assert after.some.total_us - before.some.total_us > 10_000  # > 10 ms of stall in 4 s
