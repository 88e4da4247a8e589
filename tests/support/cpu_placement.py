"""CPU placement for the timing of a request through the endpoint against the engine's own
(test_endpoint_traffic.py and benchmarks/endpoint_overhead.py place their processes alike)."""

from __future__ import annotations

import os
from pathlib import Path


def pin(pid: int, cpus: set[int]) -> None:
    """Every thread of `pid` onto `cpus` (threads made later inherit it)."""
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            os.sched_setaffinity(int(task.name), cpus)
        except ProcessLookupError:
            pass  # a thread that ended meanwhile
