"""The engine's own memory as the launcher counts it: measured just before a stop, kept in
a returning record, and compared with what has come back since.

This is the glue between the reader (sparkdeck.host.engine_memory), the records and the
switch wait: the fit check counts as "coming back" only what a running engine holds itself,
or, for an engine stopped earlier, what of its holding has not come back yet.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass

from sparkdeck.config.file_lock import FileLock
from sparkdeck.guard.claims import GIB
from sparkdeck.guard.records import Returning, Settled, settle_launch_records
from sparkdeck.guard.switch import HostSample, returned_view
from sparkdeck.host.engine_memory import (
    EngineMemory,
    EngineMemoryError,
    read_engine_memory,
    read_host_anon_shmem,
)
from sparkdeck.host.nvml import GpuReading, NvmlReader
from sparkdeck.runtime.errors import DockerRuntimeError
from sparkdeck.runtime.state import EngineState

ReadEngineMemory = Callable[[Collection[int]], EngineMemory]


def nvml_reading() -> GpuReading:
    """One NVML reading (its per-process list); an empty reading where there is no driver."""
    with NvmlReader() as reader:
        return reader.read()


def default_engine_memory(pids: Collection[int]) -> EngineMemory:
    """The real reader: the container's cgroup or its RSS, plus NVML per-process memory
    where GPU memory is host memory (see sparkdeck.host.engine_memory)."""
    return read_engine_memory(pids, nvml_reading())


@dataclass(frozen=True)
class Measured:
    """One engine measured just before its stop (or for the fit check)."""

    engine: EngineState
    pids: tuple[int, ...]
    memory: EngineMemory | None  # None: it could not be read (`problem` says why)
    problem: str | None
    sample: HostSample  # MemAvailable and AnonPages + Shmem at the same moment

    @property
    def label(self) -> str:
        return self.engine.preset_id or self.engine.name

    @property
    def held(self) -> int:
        return self.memory.held if self.memory else 0

    def describe(self) -> str:
        if self.memory is None:
            return (
                f"{self.label}: its own memory could not be read ({self.problem}); "
                "nothing counted as coming back"
            )
        return self.memory.describe(self.label)

    def returning(self, stopped_at: float | None = None) -> Returning:
        m = self.memory
        return Returning(
            self.engine.container_id,
            self.engine.name,
            self.label,
            self.held,
            m.cpu_held if m else 0,
            m.source if m else "not readable",
            self.pids,
            time.time() if stopped_at is None else stopped_at,
            self.sample.available,
            self.sample.anon_shmem,
        )


def host_sample(available: int) -> HostSample:
    return HostSample(available, read_host_anon_shmem())


def measure(
    engine: EngineState,
    host_pids: Callable[[str], Collection[int]],
    read: ReadEngineMemory,
    available: int,
) -> Measured:
    """What `engine` holds now, with the host figures the switch wait compares against."""
    sample = host_sample(available)
    try:
        pids = tuple(sorted(host_pids(engine.container_id))) if engine.alive else ()
    except DockerRuntimeError as exc:
        return Measured(engine, (), None, f"Docker did not list its processes: {exc}", sample)
    try:
        return Measured(engine, pids, read(pids), None, sample)
    except EngineMemoryError as exc:
        return Measured(engine, pids, None, str(exc), sample)


def still_coming(returning: Returning, now: HostSample) -> int:
    """How much of what a stopped engine held has not shown up in MemAvailable yet, net of
    what other processes took or freed since the stop; between 0 and what it held."""
    at_stop = HostSample(returning.available_at_stop, returning.anon_shmem_at_stop)
    back = returned_view(at_stop, now, returning.cpu_held) - returning.available_at_stop
    return min(max(returning.held - back, 0), returning.held)


def describe_returning(returning: Returning, coming: int) -> str:
    return (
        f"{returning.label}: {coming / GIB:.1f} GiB of the {returning.held / GIB:.1f} GiB "
        f"it held ({returning.source}) still to come back"
    )


def launch_in_progress() -> bool:
    """Does any sparkdeck process hold the launch lock now (LAUNCH_LOCK in
    sparkdeck.launch.lock_holder)? The kernel drops a killed holder's lock, so a launch
    killed with -9 does not count."""
    lock = FileLock("launch", "check for a launch in progress")
    if lock.acquire(blocking=False):
        lock.release()
        return False
    return True


def settle_orphans(engines: Sequence[EngineState]) -> Settled:
    """Drop records of gone containers and adopt live orphans (see settle_launch_records);
    for `status`, the TUI and the guard, which run outside any launch."""
    return settle_launch_records(engines, launch_in_progress())
