"""Unified memory as the kernel reports it in /proc/meminfo.

On a Spark, NVML cannot report GPU memory (NOT_SUPPORTED on GB10), and CPU and GPU share one
pool, so /proc/meminfo is the source of truth for what is used and what is left.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

MEMINFO = Path("/proc/meminfo")


class MemInfoError(OSError):
    """/proc/meminfo could not be read or lacks a field sparkdeck needs."""


@dataclass(frozen=True)
class MemorySnapshot:
    """Bytes, as read at one moment."""

    total: int
    available: int
    free: int
    cached: int
    buffers: int
    swap_total: int
    swap_free: int

    @property
    def used(self) -> int:
        return self.total - self.available

    @property
    def page_cache(self) -> int:
        return self.cached + self.buffers


_FIELDS = {
    "MemTotal": "total",
    "MemAvailable": "available",
    "MemFree": "free",
    "Cached": "cached",
    "Buffers": "buffers",
    "SwapTotal": "swap_total",
    "SwapFree": "swap_free",
}


def parse_meminfo(text: str) -> MemorySnapshot:
    """Turn the text of /proc/meminfo into a snapshot ("Name:   123 kB" lines)."""
    values: dict[str, int] = {}
    for line in text.splitlines():
        name, _, rest = line.partition(":")
        if name in _FIELDS:
            parts = rest.split()
            try:
                number = int(parts[0])
            except (IndexError, ValueError):
                raise MemInfoError(f"/proc/meminfo: cannot read {name!r} from {line!r}") from None
            unit = parts[1] if len(parts) > 1 else ""
            values[_FIELDS[name]] = number * 1024 if unit == "kB" else number
    missing = [name for name, key in _FIELDS.items() if key not in values]
    if missing:
        raise MemInfoError(f"/proc/meminfo lacks {', '.join(missing)}")
    return MemorySnapshot(**values)


def read_meminfo(path: Path = MEMINFO) -> MemorySnapshot:
    try:
        return parse_meminfo(path.read_text())
    except OSError as exc:
        if isinstance(exc, MemInfoError):
            raise
        raise MemInfoError(f"cannot read {path}: {exc.strerror}") from exc


def gib(n_bytes: int | float) -> str:
    return f"{n_bytes / 2**30:.1f} GiB"
