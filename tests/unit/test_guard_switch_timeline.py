"""The safe-switch wait on replayed memory, and start-up phases from engine log lines."""

from __future__ import annotations

import itertools
import threading

from sparkdeck.engines import KINDS
from sparkdeck.guard.claims import GIB
from sparkdeck.guard.switch import BACK, SKIPPED, TIMED_OUT, WAITING, SwitchWaiter, switch_progress
from sparkdeck.guard.timeline import StartupTimeline, TimelineRecorder, mark_phases
from tests.support.guard_readings import recording


class FakeClock:
    """A clock that moves only when the waiter sleeps (via the skip event's wait)."""

    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


class TickingEvent(threading.Event):
    """An Event whose wait() advances the fake clock instead of sleeping."""

    def __init__(self, clock: FakeClock, skip_at: float | None = None):
        super().__init__()
        self.clock, self.skip_at = clock, skip_at

    def wait(self, timeout: float | None = None) -> bool:
        self.clock.now += timeout or 0
        if self.skip_at is not None and self.clock.now - 100.0 >= self.skip_at:
            self.set()
        return self.is_set()


def returning_memory(clock: FakeClock, start_gib: float, end_gib: float, seconds: float):
    """MemAvailable climbing back linearly after a stop (replayed, not read)."""

    def read() -> int:
        frac = min((clock.now - 100.0) / seconds, 1.0)
        return int((start_gib + (end_gib - start_gib) * frac) * GIB)

    return read


def test_pure_decision():
    common = dict(baseline=100 * GIB, margin=2 * GIB, timeout=120)
    assert (
        switch_progress(available=97 * GIB, elapsed=5, gpu_pids_left=None, **common).state
        == WAITING
    )
    assert (
        switch_progress(available=98 * GIB, elapsed=5, gpu_pids_left=None, **common).state == BACK
    )
    # memory is back, but NVML still lists a process of the old engine: keep waiting
    assert (
        switch_progress(available=99 * GIB, elapsed=5, gpu_pids_left={4242}, **common).state
        == WAITING
    )
    assert (
        switch_progress(available=50 * GIB, elapsed=120, gpu_pids_left=None, **common).state
        == TIMED_OUT
    )


def test_waits_until_memory_is_back_within_the_margin():
    clock = FakeClock()
    seen = []
    progress = SwitchWaiter(
        returning_memory(clock, 20, 100, 60), lambda: None, clock=clock, poll_s=0.5
    ).wait(
        baseline=100 * GIB,
        margin=2 * GIB,
        timeout=120,
        old_pids=(),
        skip=TickingEvent(clock),
        on_progress=seen.append,
    )
    assert progress.state == BACK
    assert 58.0 <= progress.elapsed <= 59.0  # 98 GiB reached at 58.5 s of the 60 s climb
    assert all(p.state == WAITING for p in seen[:-1]) and seen[-1] is progress
    assert "NVML cannot tell" in progress.describe()


def test_times_out_with_a_clear_message():
    clock = FakeClock()
    progress = SwitchWaiter(returning_memory(clock, 20, 60, 60), lambda: None, clock=clock).wait(
        baseline=100 * GIB, margin=2 * GIB, timeout=120, old_pids=(), skip=TickingEvent(clock)
    )
    assert progress.state == TIMED_OUT and progress.elapsed >= 120
    assert "did not come back within 120 s" in progress.describe()


def test_old_gpu_processes_hold_the_wait_and_the_user_can_skip_it():
    clock = FakeClock()
    lingering = itertools.chain([{4242, 7}] * 10, itertools.repeat({7}))  # 7 is not ours
    progress = SwitchWaiter(lambda: 99 * GIB, lambda: next(lingering), clock=clock).wait(
        baseline=100 * GIB,
        margin=2 * GIB,
        timeout=120,
        old_pids=(4242, 4243),
        skip=TickingEvent(clock),
    )
    assert progress.state == BACK and progress.gpu_pids_left == ()
    assert progress.elapsed == 5.0  # ten polls of 0.5 s listed 4242
    clock = FakeClock()
    skipped = SwitchWaiter(lambda: 10 * GIB, lambda: set(), clock=clock).wait(
        baseline=100 * GIB,
        margin=2 * GIB,
        timeout=120,
        old_pids=(),
        skip=TickingEvent(clock, skip_at=3.0),
    )
    assert skipped.state == SKIPPED and "skipped by the user" in skipped.describe()


VLLM_LOG = """\
INFO 11-30 04:00:01 [api_server.py:1] vLLM API server version 0.32.0
INFO 11-30 04:00:03 [gpu_model_runner.py:2] Starting to load model /models/m...
INFO 11-30 04:00:20 [default_loader.py:3] Loading weights took 16.50 seconds
INFO 11-30 04:00:25 [gpu_worker.py:4] Available KV cache memory: 60.12 GiB
INFO 11-30 04:00:26 [gpu_model_runner.py:5] Capturing CUDA graphs (mixed prefill-decode, PIECEWISE): 100%
INFO 11-30 04:00:40 [launcher.py:6] Application startup complete.
"""
SGLANG_LOG = """\
[2026-11-30 04:00:02] Load weight begin. avail mem=118.20 GB
[2026-11-30 04:00:30] KV Cache is allocated. #tokens: 800000, K size: 30 GB, V size: 30 GB
[2026-11-30 04:00:31] Memory pool end. avail mem=20.1 GB
[2026-11-30 04:00:32] Capture cuda graph begin. This can take up to several minutes.
[2026-11-30 04:00:50] The server is fired up and ready to roll!
"""


def test_vllm_and_sglang_phases_from_their_log_lines():
    lines = [(float(i), text) for i, text in enumerate(VLLM_LOG.splitlines())]
    marks = mark_phases(lines, KINDS["vllm"].startup_phases)
    assert [(m.phase, m.t) for m in marks] == [
        ("weights loading", 1.0),
        ("KV-cache allocation", 3.0),
        ("CUDA graph capture", 4.0),
        ("ready", 5.0),
    ]
    lines = [(float(i), text) for i, text in enumerate(SGLANG_LOG.splitlines())]
    marks = mark_phases(lines, KINDS["sglang"].startup_phases)
    assert [m.phase for m in marks] == [
        "weights loading",
        "KV-cache allocation",
        "CUDA graph capture",
        "ready",
    ]
    assert marks[1].t == 1.0  # the first matching line wins


def test_timeline_records_and_round_trips():
    _, readings = recording("ramp_to_wedge")
    recorder = TimelineRecorder(started=readings[0].t)
    for r in readings[:20]:
        recorder.add(r)
    lines = [(2.0, "Starting to load model"), (9.0, "Application startup complete")]
    timeline = recorder.timeline(mark_phases(lines, KINDS["vllm"].startup_phases))
    assert len(timeline.points) == 20 and timeline.points[3].t == 1.5
    assert timeline.peak_used == max(r.memory.used for r in readings[:20])
    assert StartupTimeline.from_dict(timeline.to_dict()) == timeline
