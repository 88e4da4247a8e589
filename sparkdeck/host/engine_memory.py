"""What one engine holds in memory itself, read from its container's processes.

The safe switch and the fit check need "how much will come back when this engine stops", and
the host-wide MemAvailable cannot say: another process taking 6 GiB after a launch looks just
like the engine growing. So the engine's own holding is read from three places:

- its container's memory cgroup (v1 `memory.stat` total_rss + total_shmem, v2 anon + shmem):
  the kernel's own per-container count, shared pages counted once. Preferred where readable.
- its processes' RSS (`/proc/PID/status` RssAnon + RssShmem): the fallback where the cgroup is
  not reachable (another cgroup namespace, a driver layout not recognised). Shared memory
  mapped by several processes is counted by each, so it can overstate.
- NVML's per-process used GPU memory, only where GPU memory is host memory (a Spark's unified
  pool): there CUDA allocations are host memory of the process but made by the driver, outside
  the cgroup's anon count and outside RSS, so they are added. On a discrete GPU they live on
  the card and never show in MemAvailable, so they are not counted.

File-backed page cache (the weights the engine read) is not counted: it stays cached after the
engine stops and MemAvailable already counts it as available, so it never "comes back".
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass
from pathlib import Path

from sparkdeck.host.nvml import GpuReading

GIB = 2**30
PROC = Path("/proc")


class EngineMemoryError(OSError):
    """The engine's processes exist but none of the sources could be read."""


@dataclass(frozen=True)
class CgroupMemory:
    """The anonymous and shared memory charged to one cgroup, from its memory.stat."""

    path: str
    version: int  # 1 or 2
    anon: int
    shmem: int

    @property
    def held(self) -> int:
        return self.anon + self.shmem


@dataclass(frozen=True)
class EngineMemory:
    """One reading of what an engine holds; `held` is the figure the guard counts."""

    pids: tuple[int, ...]  # the host PIDs that were alive when read
    cgroup: CgroupMemory | None
    rss: int | None  # RssAnon + RssShmem summed over `pids`; None when none could be read
    gpu: int | None  # NVML per-process bytes on unified memory; None when not counted
    held: int
    source: str  # "container cgroup", "process RSS", "... + NVML per-process", "no processes"

    @property
    def cpu_held(self) -> int:
        """The part that shows in /proc/meminfo's AnonPages + Shmem (not the GPU part)."""
        return self.held - (self.gpu or 0)

    def describe(self, label: str) -> str:
        return f"{label} holds {self.held / GIB:.1f} GiB ({self.source})"

    def to_dict(self) -> dict[str, object]:
        return {
            "held": self.held,
            "source": self.source,
            "pids": list(self.pids),
            "cgroup": None if self.cgroup is None else self.cgroup.held,
            "cgroup_path": None if self.cgroup is None else self.cgroup.path,
            "rss": self.rss,
            "gpu": self.gpu,
        }


def _stat_fields(text: str) -> dict[str, int]:
    fields = {}
    for line in text.splitlines():
        name, _, value = line.partition(" ")
        try:
            fields[name] = int(value)
        except ValueError:
            continue
    return fields


def _mounts(proc: Path) -> list[tuple[str, str, str, str]]:
    """(mount root, mount point, fstype, super options) of every cgroup mount we can see."""
    found = []
    for line in (proc / "self" / "mountinfo").read_text().splitlines():
        left, _, right = line.partition(" - ")
        fields, tail = left.split(), right.split()
        if len(fields) >= 5 and len(tail) >= 3 and tail[0] in ("cgroup", "cgroup2"):
            found.append((fields[3], fields[4], tail[0], tail[2]))
    return found


def _under(mount_root: str, mount_point: str, group: str) -> Path:
    # A mount whose root is not "/" (inside a container) shows groups relative to that root.
    if mount_root != "/" and group.startswith(mount_root):
        group = group[len(mount_root) :]
    return Path(mount_point) / group.lstrip("/")


def cgroup_memory(pid: int, proc: Path = PROC) -> CgroupMemory | None:
    """The memory cgroup `pid` is in, read; None when it cannot be found or read."""
    try:
        lines = (proc / str(pid) / "cgroup").read_text().splitlines()
        mounts = _mounts(proc)
    except OSError:
        return None
    for line in lines:  # "4:memory:/docker/<id>" (v1) or "0::/system.slice/docker-<id>.scope"
        _, controllers, group = line.split(":", 2)
        if group.strip() in ("/", ""):  # the root group counts the whole host, not a container
            continue
        for root, point, fstype, options in mounts:
            if (
                controllers
                and fstype == "cgroup"
                and "memory" in controllers.split(",")
                and "memory" in options.split(",")
            ):
                stat = _under(root, point, group) / "memory.stat"
                try:
                    f = _stat_fields(stat.read_text())
                except OSError:
                    continue
                return CgroupMemory(
                    str(stat.parent),
                    1,
                    f.get("total_rss", f.get("rss", 0)),
                    f.get("total_shmem", f.get("shmem", 0)),
                )
            if not controllers and fstype == "cgroup2":
                # In a hybrid layout the v2 group has no memory controller: no memory.stat.
                stat = _under(root, point, group) / "memory.stat"
                try:
                    f = _stat_fields(stat.read_text())
                except OSError:
                    continue
                return CgroupMemory(str(stat.parent), 2, f.get("anon", 0), f.get("shmem", 0))
    return None


def process_rss(pid: int, proc: Path = PROC) -> int | None:
    """RssAnon + RssShmem of one process in bytes; None when it is gone or unreadable."""
    try:
        text = (proc / str(pid) / "status").read_text()
    except OSError:
        return None
    total = 0
    for line in text.splitlines():
        name, _, rest = line.partition(":")
        if name in ("RssAnon", "RssShmem"):
            total += int(rest.split()[0]) * 1024
    return total


def live_pids(pids: Collection[int], proc: Path = PROC) -> set[int]:
    """Those of `pids` that still exist (a zombie still holding its memory counts)."""
    return {pid for pid in pids if (proc / str(pid)).exists()}


def _gpu_bytes(pids: Collection[int], gpu: GpuReading | None) -> int | None:
    if gpu is None or not gpu.unified_memory:
        return None
    listed = [(pid, used) for g in gpu.gpus for pid, used in (g.processes or ())]
    if not any(g.processes is not None for g in gpu.gpus):
        return None
    return sum(used or 0 for pid, used in listed if pid in pids)


def read_engine_memory(
    pids: Collection[int], gpu: GpuReading | None = None, proc: Path = PROC
) -> EngineMemory:
    """What the engine whose host processes are `pids` holds now.

    No live process: it holds nothing (held 0, source "no processes"). Processes that exist
    but cannot be read at all raise EngineMemoryError.
    """
    alive = tuple(sorted(live_pids(pids, proc)))
    if not alive:
        return EngineMemory((), None, None, None, 0, "no processes")
    # Every process of one container is in one memory cgroup; the first readable one is it.
    group = next((g for g in (cgroup_memory(pid, proc) for pid in alive) if g), None)
    sizes = [size for size in (process_rss(pid, proc) for pid in alive) if size is not None]
    rss = sum(sizes) if sizes else None
    gpu_held = _gpu_bytes(alive, gpu)
    if group is not None:
        cpu, source = group.held, "container cgroup"
    elif rss is not None:
        cpu, source = rss, "process RSS"
    else:
        raise EngineMemoryError(f"cannot read the memory of processes {list(alive)}")
    if gpu_held is not None:
        source += " + NVML per-process"
    return EngineMemory(alive, group, rss, gpu_held, cpu + (gpu_held or 0), source)


def read_host_anon_shmem(path: Path = PROC / "meminfo") -> int:
    """AnonPages + Shmem of the whole host: what every process together holds of the kind
    the engine's cgroup count measures, so the switch wait can tell when others took some."""
    values = {}
    try:
        for line in path.read_text().splitlines():
            name, _, rest = line.partition(":")
            if name in ("AnonPages", "Shmem"):
                values[name] = int(rest.split()[0]) * 1024
    except (OSError, ValueError, IndexError) as exc:
        raise EngineMemoryError(f"cannot read AnonPages/Shmem from {path}: {exc}") from exc
    if len(values) != 2:
        raise EngineMemoryError(f"{path} lacks AnonPages or Shmem")
    return values["AnonPages"] + values["Shmem"]
