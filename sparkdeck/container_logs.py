"""Reading a container's log through the docker SDK: both streams merged in order, times
parsed, and a byte stream cut into lines.

Kept apart from the runtime's lifecycle code (start, readiness, stop): these functions take
an SDK container object and do no ownership checks; DockerRuntime does those first.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from datetime import datetime
from typing import Any

import docker.errors


def stamped_lines(container: Any, lines: int | str) -> list[tuple[str, str]]:
    """The last `lines` lines ("all" for every line) as (RFC 3339 stamp, text), in order.

    Each stream is read on its own and merged by timestamp: asked for both at once, dockerd
    20.10's json-file `tail` was seen to drop a final stderr line (the one that says why an
    engine died).
    """
    stamped: list[tuple[str, str]] = []
    for stream in ("stdout", "stderr"):
        try:
            raw = container.logs(tail=lines, timestamps=True, stdout=stream == "stdout",
                                 stderr=stream == "stderr")
        except docker.errors.APIError:
            continue
        for line in raw.decode("utf-8", "replace").splitlines():
            stamp, _, text = line.partition(" ")
            stamped.append((stamp, text))
    stamped.sort(key=lambda pair: pair[0])  # RFC 3339 with fixed nanoseconds sorts as text
    return stamped if lines == "all" else stamped[-int(lines):]


def stamp_seconds(stamp: str) -> float | None:
    """Docker's 2026-11-30T04:01:02.123456789Z as seconds since the epoch (None if unreadable;
    Python's parser takes at most 6 fractional digits)."""
    head, _, frac = stamp.rstrip("Z").partition(".")
    try:
        return datetime.fromisoformat(f"{head}.{(frac + '000000')[:6]}+00:00").timestamp()
    except ValueError:
        return None


def split_lines(chunks: Iterable[bytes]) -> Iterator[str]:
    """Cut a streamed log (chunks that need not end at a newline) into text lines."""
    pending = b""
    for chunk in chunks:
        pending += chunk
        *lines, pending = pending.split(b"\n")
        for line in lines:
            yield line.decode("utf-8", "replace").rstrip("\r")
    if pending:
        yield pending.decode("utf-8", "replace")
