"""The engine's own memory, read from its real container: a busybox engine that writes a
known amount into its /dev/shm (tmpfs pages charged to its cgroup and held until it stops),
measured by sparkdeck.host.engine_memory while another process holds far more beside it.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from sparkdeck.guard.own_memory import measure
from sparkdeck.host.engine_memory import (
    EngineMemoryError,
    cgroup_memory,
    read_engine_memory,
    read_host_anon_shmem,
)
from tests.support.busybox_engines import holder
from tests.support.memory_hog import start_hog, stop_hog

pytestmark = pytest.mark.docker
MIB = 2**20


def test_reader_measures_what_the_engine_holds_not_what_others_hold(
    runtime, tmp_path, busybox_image
):
    engine = runtime.start(holder(tmp_path, busybox_image, 192).container_spec())
    ready = runtime.wait_ready(engine, 60)
    pids = runtime.host_pids(ready.container_id)
    assert pids
    hog = start_hog(512)  # another process, holding more than the engine, meanwhile
    try:
        memory = read_engine_memory(pids)
        anon_shmem = read_host_anon_shmem()
    finally:
        stop_hog(hog)
    shown = f"{memory.to_dict()}"
    # this host has the cgroup v1 memory controller: the container's own group is read
    assert memory.source == "container cgroup", shown
    assert memory.cgroup is not None and ready.container_id in memory.cgroup.path, shown
    assert 192 * MIB <= memory.held < (192 + 24) * MIB, shown  # busybox itself: a few MiB
    assert memory.cgroup.shmem >= 192 * MIB, shown
    # RSS cannot see tmpfs pages nobody maps: why the cgroup is preferred
    assert memory.rss is not None and memory.rss < 24 * MIB, shown
    assert memory.gpu is None  # no GPU here: nothing from NVML is added
    assert anon_shmem >= 192 * MIB + 512 * MIB  # the host figure sees both
    assert "holds 0.2 GiB (container cgroup)" in memory.describe("holder")

    # the same through the launcher's glue, which also takes the host figures
    measured = measure(ready, runtime.host_pids, read_engine_memory, 0)
    assert measured.memory is not None and abs(measured.held - memory.held) < 8 * MIB

    runtime.stop(ready.container_id, grace=0)
    gone = read_engine_memory(pids)
    assert (gone.held, gone.source, gone.pids) == (0, "no processes", ())


def test_rss_is_the_fallback_and_unreadable_processes_raise(tmp_path):
    """A process outside any container (this test's own child) is read through the memory
    cgroup this whole test run is in (so only a lower bound is asserted); a /proc copy
    without cgroup files falls back to RSS, and one without status files raises the typed
    error."""
    hog = start_hog(96)
    try:
        real = read_engine_memory([hog.pid])
        assert real.held >= 96 * MIB
        fake = tmp_path / "proc"
        (fake / str(hog.pid)).mkdir(parents=True)
        status = Path(f"/proc/{hog.pid}/status").read_text()
        (fake / str(hog.pid) / "status").write_text(status)
        fallback = read_engine_memory([hog.pid], proc=fake)
        assert fallback.source == "process RSS" and fallback.held >= 96 * MIB
        (fake / str(hog.pid) / "status").unlink()
        with pytest.raises(EngineMemoryError):
            read_engine_memory([hog.pid], proc=fake)
    finally:
        stop_hog(hog)


def test_cgroup_v2_layout_is_read_from_a_recorded_tree(tmp_path):
    """A cgroup v2 host (the unified hierarchy, systemd driver), recorded as files: the
    group comes from /proc/PID/cgroup and mountinfo, anon + shmem from its memory.stat."""
    proc, root = tmp_path / "proc", tmp_path / "cg"
    group = root / "system.slice" / "docker-abc.scope"
    group.mkdir(parents=True)
    (group / "memory.stat").write_text("anon 1048576\nfile 999999999\nshmem 4096\n")
    (proc / "self").mkdir(parents=True)
    (proc / "self" / "mountinfo").write_text(
        f"30 23 0:26 / {root} rw,nosuid - cgroup2 cgroup2 rw,nsdelegate\n"
    )
    (proc / "77").mkdir()
    (proc / "77" / "cgroup").write_text("0::/system.slice/docker-abc.scope\n")
    found = cgroup_memory(77, proc)
    assert found is not None and (found.version, found.anon, found.shmem) == (2, 1048576, 4096)
    assert found.held == 1048576 + 4096  # page cache ("file") does not come back: not held


def test_nvml_per_process_memory_is_added_only_where_gpu_memory_is_host_memory():
    """The GB10 fixture (hand-written, NOT recorded: no Spark here) and the H200 recording,
    with their process lists pointed at a real process of this test: on the unified pool
    the engine's NVML bytes are added (driver allocations, outside its cgroup and RSS); on
    a discrete card they live on the card and are not."""
    from dataclasses import replace

    from tests.support.telemetry import GB10, H200, replay

    hog = start_hog(32)
    try:
        for path, unified in ((GB10, True), (H200, False)):
            reading = replay(path)[1][-1][1]
            assert reading.unified_memory is unified
            listed = ((hog.pid, 96 * 2**30), (1, 5 * 2**30))  # pid 1 is not the engine's
            reading = replace(
                reading, gpus=tuple(replace(g, processes=listed) for g in reading.gpus[:1])
            )
            memory = read_engine_memory([hog.pid], reading)
            if unified:
                assert memory.gpu == 96 * 2**30 and memory.held >= 96 * 2**30 + 32 * MIB
                assert memory.source.endswith(" + NVML per-process")
                assert memory.cpu_held == memory.held - 96 * 2**30
            else:
                assert memory.gpu is None and memory.held < 96 * 2**30
                assert "NVML" not in memory.source
    finally:
        stop_hog(hog)
