"""The fit check and the switch wait count only the old engine's own memory (issue 11, item 5).

Real parts: busybox engines on the real Docker daemon that hold a known amount in /dev/shm,
real memory hogs in other processes (bounded: at most 1.5 GiB in all, and at most 3/16 of
MemAvailable), and the real /proc/meminfo. Before this, "coming back" was MemAvailable
before the launch minus MemAvailable now, so a hog counted as the engine's memory, and the
switch wait blocked its whole timeout for memory the engine never held.
"""

from __future__ import annotations

import subprocess
import sys
import threading
import time

import pytest

from sparkdeck.config.settings import GuardSettings
from sparkdeck.guard.claims import GIB
from sparkdeck.guard.records import load_returning
from sparkdeck.guard.switch import BACK, SwitchWaiter
from sparkdeck.host.engine_memory import live_pids
from sparkdeck.host.meminfo import read_meminfo
from sparkdeck.launch.events import FitChecked, SwitchWaited
from sparkdeck.launch.sequence import Launcher
from tests.conftest import busybox_preset
from tests.support.busybox_engines import holder
from tests.support.memory_hog import start_hog, stop_hog

pytestmark = pytest.mark.docker
MIB = 2**20


def test_fit_and_switch_wait_count_the_engines_memory_not_a_hogs(runtime, tmp_path, busybox_image):
    available = read_meminfo().available
    # 1 GiB, or less when other work on this box leaves little (seen: 4 GiB available)
    hog_mib = min(1024, available // MIB // 8)
    assert hog_mib >= 256, f"too little memory to test with ({available // MIB} MiB)"
    events: list = []
    # the hog taken after the stop is twice this margin: the old wait ran to its 60 s
    guard = GuardSettings(switch_timeout_s=60.0, switch_margin_gib=hog_mib / 2 / 1024)
    launcher = Launcher(
        runtime, on_event=events.append, guard=guard, gpu_pids=lambda: None, stop_grace=1
    )
    launcher.launch(holder(tmp_path, busybox_image, 64, "a"), flush=False)
    nxt = busybox_preset(
        tmp_path, "b", busybox_image, "exec httpd -f -p 8080 -h /www", startup_timeout=30.0
    )
    hogs = [start_hog(hog_mib // 2)]  # another process takes memory while A runs
    try:
        fit = launcher.check_fit(nxt, flush_possible=False)
        shown = "\n".join(fit.lines())
        assert 64 * MIB <= fit.returning < 96 * MIB, shown  # A's own, not A's + the hog's
        assert "a holds 0.1 GiB (container cgroup)" in shown

        launcher.stop_all()  # `sparkdeck stop`: no wait; the record keeps what A held
        (returning,) = load_returning()
        assert returning.source == "container cgroup" and returning.pids
        assert 64 * MIB <= returning.held < 96 * MIB

        hogs.append(start_hog(hog_mib))  # after the stop, more than the switch margin
        fit = launcher.check_fit(nxt, flush_possible=False)
        shown = "\n".join(fit.lines())
        assert fit.returning < 96 * MIB, shown  # at most what A held, whatever the hog took
        assert "of the 0.1 GiB it held (container cgroup) still to come back" in shown

        events.clear()
        started = time.monotonic()
        launcher.launch(nxt, flush=False)
        waited = time.monotonic() - started
    finally:
        for hog in hogs:
            stop_hog(hog)
    waits = [e.progress for e in events if isinstance(e, SwitchWaited) and e.engine == "a"]
    (checked,) = [e.fit for e in events if isinstance(e, FitChecked)]
    assert checked.returning < 96 * MIB
    # A's processes are gone and its 64 MiB came back: the wait ends at once, not at 60 s
    assert waits and waits[-1].state == BACK, [p.describe() for p in waits]
    assert waits[-1].elapsed < 10 and waited < 30, (waited, [p.describe() for p in waits])
    assert load_returning() == []


def test_switch_wait_goes_on_while_an_old_process_exists():
    """Memory already looks back, but a process of the old engine still exists (a real
    process, killed and reaped after 1.5 s): the wait goes on until it is gone."""
    old = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    threading.Timer(1.5, lambda: (old.kill(), old.wait())).start()
    seen: list = []
    try:
        progress = SwitchWaiter(
            lambda: 10 * GIB, lambda: None, poll_s=0.1, read_live_pids=live_pids
        ).wait(baseline=5 * GIB, margin=0, timeout=30, old_pids=[old.pid], on_progress=seen.append)
    finally:
        old.kill()
        old.wait()
    assert progress.state == BACK and 1.4 <= progress.elapsed < 10, progress.describe()
    assert seen[0].pids_left == (old.pid,)
    assert "1 process(es) of the old engine left" in seen[0].describe()
    assert progress.pids_left == ()
