"""The flight recorder against real parts: real /proc samples from the telemetry sampler, a
real recording process killed with SIGKILL, a real ~2 GiB memory hog, SQLite on disk.

Fakes, labelled where used: the boot id (a lambda, to simulate a reboot: no test reboots the
machine), old time stamps for retention (rows written by the test), and an NVML replay of the
H200 recording (tests/fixtures/nvml, recorded on a real H200) for the GPU columns.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from sparkdeck.config.settings import GuardSettings
from sparkdeck.host.meminfo import read_meminfo
from sparkdeck.host.nvml import NvmlReader
from sparkdeck.recorder import FlightRecorder, RecorderBusy, RecorderLimits
from sparkdeck.recorder.query import last_postmortem, rows_between
from sparkdeck.recorder.rows import RecordedSample
from sparkdeck.recorder.store import db_size, read_boot_id
from sparkdeck.telemetry.sampler import TelemetrySampler
from tests.support.memory_hog import pcp_free_bytes
from tests.support.recording_child import REPO, child
from tools.record_nvml import RecordedNvml

H200 = REPO / "tests" / "fixtures" / "nvml" / "h200_clock_events.json"
GIB = 2**30


def test_real_samples_are_recorded_and_read_back(tmp_path: Path) -> None:
    db = tmp_path / "rec.sqlite"
    recorder, postmortem = FlightRecorder.open(db)
    assert postmortem is None  # a new file has no previous session
    sampler = TelemetrySampler()
    started = time.time()
    rows = []
    for _ in range(3):
        rows.append(recorder.record(sampler.sample(), "tiny-llama running", 12.5))
        time.sleep(0.2)
    recorder.close()
    back = rows_between(db, started - 1)
    assert back == rows
    total = read_meminfo().total
    assert all(r.mem_total == total and 0 < (r.mem_available or 0) < total for r in back)
    assert back[-1].engine_state == "tiny-llama running" and back[-1].tok_s == 12.5
    if back[0].psi_some_total_us is not None:  # a kernel with PSI (the test machines have it)
        assert back[0].psi_some_total_us <= back[-1].psi_some_total_us
        assert back[0].psi_some_rate is None and back[1].psi_some_rate is not None
    reopened, postmortem = FlightRecorder.open(db)
    reopened.close()
    assert postmortem is None  # close() wrote the clean-stop mark


def test_kill_9_of_a_recording_process_loses_at_most_5_s_and_gives_a_postmortem(
    tmp_path: Path,
) -> None:
    db = tmp_path / "rec.sqlite"
    proc = child(db)
    assert proc.stdout is not None
    stamps = [float(proc.stdout.readline()) for _ in range(8)]  # ~8 s of recording
    time.sleep(0.5)
    killed_at = time.time()
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(timeout=10)
    kept = rows_between(db, 0)
    assert kept and kept[0].t == pytest.approx(stamps[0], abs=0.01)
    # the promise: at most ~5 s lost (commit every 3 s + one sample period)
    assert killed_at - kept[-1].t <= 5.0, (killed_at - kept[-1].t, len(kept))
    assert all(r.engine_state == "child-engine running" for r in kept)
    recorder, postmortem = FlightRecorder.open(db)
    recorder.close()
    assert postmortem is not None and not postmortem.rebooted
    assert "killed or crashed" in postmortem.cause
    assert postmortem.ended_at == kept[-1].t and postmortem.rows == len(kept)
    assert postmortem.verdict.startswith(("no memory trouble recorded", "memory was tight"))
    stored, file = last_postmortem(db)
    assert stored == postmortem
    assert Path(file).read_text().splitlines()[3] == f"verdict: {postmortem.verdict}"
    again, none = FlightRecorder.open(db)  # judged once, not at every start
    again.close()
    assert none is None


def test_a_changed_boot_id_reads_as_a_machine_restart(tmp_path: Path) -> None:
    db = tmp_path / "rec.sqlite"
    proc = child(db, "vanish")
    assert proc.wait(timeout=60) == 0
    this_boot = read_boot_id()
    assert this_boot != "unknown"
    # FAKE boot id: the next start happens "after a reboot"
    recorder, postmortem = FlightRecorder.open(db, boot_id=lambda: "another-boot")
    assert postmortem is not None and postmortem.rebooted and postmortem.rows == 3
    assert "machine restarted" in postmortem.cause
    recorder.close()
    # a clean stop and then a reboot is a normal shutdown: no post-mortem
    recorder, postmortem = FlightRecorder.open(db, boot_id=lambda: "a-third-boot")
    recorder.close()
    assert postmortem is None


def test_a_second_recorder_on_the_same_file_is_refused(tmp_path: Path) -> None:
    db = tmp_path / "rec.sqlite"
    recorder, _ = FlightRecorder.open(db)
    try:
        with pytest.raises(RecorderBusy, match="already being recorded"):
            FlightRecorder.open(db)
    finally:
        recorder.close()
    FlightRecorder.open(db)[0].close()  # free again once closed


def test_retention_prunes_rows_older_than_keep_days(tmp_path: Path) -> None:
    db = tmp_path / "rec.sqlite"
    now = time.time()
    recorder, _ = FlightRecorder.open(db, limits=RecorderLimits(keep_days=2.0))
    # rows with old time stamps, written by the test
    for days in (9.0, 3.0, 2.1, 1.9, 0.5):
        recorder.add(RecordedSample(t=now - days * 86400, mem_available=int(days * GIB)))
    recorder.add(RecordedSample(t=now, mem_available=1))
    assert recorder.prune() == 3
    recorder.close()
    assert [r.mem_available for r in rows_between(db, 0)] == [int(1.9 * GIB), GIB // 2, 1]


def test_size_cap_keeps_the_file_bounded_and_the_newest_rows(tmp_path: Path) -> None:
    db = tmp_path / "rec.sqlite"
    clock = [time.time()]
    limits = RecorderLimits(max_bytes=2 * 2**20, commit_s=60.0, prune_s=600.0)
    recorder, _ = FlightRecorder.open(db, limits=limits, wall=lambda: clock[0])
    sizes = []
    for n in range(60_000):  # ~16 h at 1 Hz: far more than 2 MiB of rows
        clock[0] += 1.0
        recorder.add(
            RecordedSample(
                t=clock[0],
                mem_total=128 * GIB,
                mem_available=n,
                engine_state="vllm-ngc running",
                tok_s=float(n),
            )
        )
        if n % 5000 == 4999:
            sizes.append(db_size(db))
    recorder.close()
    kept = rows_between(db, 0)
    assert kept[-1].mem_available == 59_999  # the newest row is there
    assert kept[0].mem_available > 10_000  # the oldest went
    # bounded: the cap plus the WAL (checkpointed at 1 MiB) and one prune period's rows
    assert max(sizes) <= 2 * 2**20 + 1.25 * 2**20, sizes
    assert db_size(db) <= 2 * 2**20 + 2**19


def test_gpu_columns_and_throttle_from_the_h200_recording(tmp_path: Path) -> None:
    nvml = RecordedNvml(H200).use(RecordedNvml(H200).indices("load")[0])
    sampler = TelemetrySampler(gpu=NvmlReader(nvml, host_total_bytes=nvml.host_mem_total_bytes))
    recorder, _ = FlightRecorder.open(tmp_path / "rec.sqlite")
    row = recorder.record(sampler.sample(), None, None)
    recorder.close()
    gpu = sampler.sample().gpu.gpus[0]
    assert (row.gpu_sm_mhz, row.gpu_sm_max_mhz, row.gpu_util, row.gpu_temp_c) == (
        gpu.sm_clock_mhz,
        1980,
        gpu.utilisation_gpu,
        gpu.temperature_c,
    )
    assert row.gpu_power_w == gpu.power_w and row.gpu_reasons == "SW power cap"
    assert row.throttle == "power cap"
    assert rows_between(tmp_path / "rec.sqlite", 0) == [row]


HOG = textwrap.dedent("""
    import sys, time
    size = int(sys.argv[1])
    block = bytearray(size)
    for i in range(0, size, 4096):
        block[i] = 1  # touch every page: resident, not just reserved
    print("held", flush=True)
    time.sleep(float(sys.argv[2]))
""")


def test_a_real_memory_hog_shows_in_the_rows_and_the_postmortem(tmp_path: Path) -> None:
    """A ~2 GiB hog while recording at 2 Hz: MemAvailable dips by most of it. The post-mortem
    is judged with a guard whose stop threshold sits just above the hog's low point (raised
    for the test, so nothing here endangers the machine) and must name the hog's moment.

    Free pages parked on the kernel's per-CPU lists (Linux 6.18 here) are in neither MemFree
    nor MemAvailable, and an allocation takes them first: the dip is checked with the change
    of those lists added back (pcp_free_bytes in tests/integration/test_guard_real_memory.py
    says more)."""
    db = tmp_path / "rec.sqlite"
    recorder, _ = FlightRecorder.open(db, limits=RecorderLimits(commit_s=1.0))
    sampler = TelemetrySampler()
    parked = {}
    for _ in range(4):
        recorder.record(sampler.sample(), "baseline idle", None)
        time.sleep(0.5)
    parked["base"] = pcp_free_bytes()
    hog = subprocess.Popen(
        [sys.executable, "-c", HOG, str(2 * GIB), "3"], stdout=subprocess.PIPE, text=True
    )
    assert hog.stdout is not None and hog.stdout.readline().strip() == "held"
    for _ in range(4):
        recorder.record(sampler.sample(), "test-hog holding", None)
        time.sleep(0.5)
    parked["held"] = pcp_free_bytes()
    hog.wait(timeout=30)
    time.sleep(0.5)
    for _ in range(3):
        recorder.record(sampler.sample(), "after the hog", None)
        time.sleep(0.5)
    parked["after"] = pcp_free_bytes()
    recorder.flush()
    rows = rows_between(db, 0)
    base = max(r.mem_available or 0 for r in rows if r.engine_state == "baseline idle")
    held = min(r.mem_available or 0 for r in rows if r.engine_state == "test-hog holding")
    after = max(r.mem_available or 0 for r in rows if r.engine_state == "after the hog")
    dip = base - held + parked["base"] - parked["held"]
    back = after - held + parked["after"] - parked["held"]
    assert dip >= 1.25 * GIB, (base / GIB, held / GIB, {k: v / GIB for k, v in parked.items()})
    assert back >= 1.25 * GIB, (after / GIB, held / GIB)  # and it came back
    # the end is unclean: drop the handle without the clean-stop mark (as a freeze would)
    recorder._db.close()
    recorder._lock.release()
    total = rows[0].mem_total or 1
    guard = GuardSettings(
        stop_available_pct=100.0 * (held + GIB // 4) / total,
        warn_available_pct=100.0 * (held + GIB // 4) / total,
    )
    recorder, postmortem = FlightRecorder.open(db, guard=guard)
    recorder.close()
    assert postmortem is not None and postmortem.memory == "ran out"
    assert postmortem.verdict.startswith("memory ran out: MemAvailable ")
    assert "engine test-hog holding" in postmortem.verdict
    assert postmortem.min_available_bytes == held


def test_settings_toml_sets_the_bounds_and_a_bad_value_names_file_and_key(
    isolated_dirs: dict[str, Path],
) -> None:
    from sparkdeck.config.settings import Settings, SettingsError, load_settings, settings_path

    path = settings_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("[recorder]\nkeep_days = 2.5\nmax_mib = 8\n")
    limits = RecorderLimits.from_settings(load_settings().recorder)
    assert (limits.keep_days, limits.max_bytes) == (2.5, 8 * 2**20)
    assert RecorderLimits.from_settings(Settings().recorder).keep_days == 7.0
    path.write_text("[recorder]\nmax_mib = 1\n")
    with pytest.raises(SettingsError, match=r"settings.toml: recorder.max_mib: .*at least 4"):
        load_settings()


def test_a_full_disk_is_a_recorder_error_and_the_rows_wait_for_room(tmp_path: Path) -> None:
    """ "Disk full" is SQLite's own SQLITE_FULL, brought on by capping the file's page count
    (PRAGMA max_page_count; filling a real filesystem here would disturb the other work)."""
    from sparkdeck.recorder.store import MAX_PENDING, RecorderError

    db = tmp_path / "rec.sqlite"
    clock = [time.time()]
    recorder, _ = FlightRecorder.open(
        db, limits=RecorderLimits(commit_s=1.0), wall=lambda: clock[0]
    )
    pages = recorder._db.execute("PRAGMA page_count").fetchone()[0]
    recorder._db.execute(f"PRAGMA max_page_count = {pages}")
    failures = 0
    for n in range(MAX_PENDING + 200):
        clock[0] += 1.0
        try:
            recorder.add(RecordedSample(t=clock[0], mem_available=n, engine_state="x" * 200))
        except RecorderError as exc:
            assert "cannot write the flight recording" in str(exc) and str(db) in str(exc)
            failures += 1
    assert failures > 100
    assert len(recorder._pending) == MAX_PENDING  # bounded: the newest rows wait
    recorder._db.execute("PRAGMA max_page_count = 1073741823")  # room again
    recorder.close()
    kept = rows_between(db, 0)
    assert len(kept) >= MAX_PENDING and kept[-1].mem_available == MAX_PENDING + 199
    again, postmortem = FlightRecorder.open(db)
    again.close()
    assert postmortem is None  # and the stop was clean


def test_a_file_that_is_not_a_recording_is_named_and_left_alone(tmp_path: Path) -> None:
    from sparkdeck.recorder import RecorderError

    db = tmp_path / "rec.sqlite"
    db.write_bytes(b"not a database at all, but the user's file" * 100)
    with pytest.raises(RecorderError, match=f"{db}: cannot open .*move it away"):
        FlightRecorder.open(db)
    assert db.read_bytes().startswith(b"not a database")  # never overwritten
    with pytest.raises(RecorderError, match=str(db)):
        rows_between(db, 0)
    FlightRecorder.open(tmp_path / "other.sqlite")[0].close()  # the lock was let go
