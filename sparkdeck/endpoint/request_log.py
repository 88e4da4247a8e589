"""The endpoint's request log: one JSON line per forwarded request, in the data dir.

What is kept: when, from where, which model, the HTTP status, prompt and output tokens,
time to first token and decode speed. What is never kept: the prompt or the reply text (a
record is built from counts and clocks only; tests/integration/test_endpoint.py greps the
file for the prompt). The file is append-only, a whole line at a time (a full disk drops
a line whole), and bounded: past MAX_BYTES it is renamed to
`requests.jsonl.1` (the older one dropped), so the log never holds more than twice that.
"""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from sparkdeck.config import paths
from sparkdeck.config.paths import append_whole, open_for_append

LOG_NAME = "requests.jsonl"
MAX_BYTES = 4 * 2**20  # ~15k requests a file; two files kept


@dataclass(frozen=True)
class RequestRecord:
    """One forwarded request, measured at the endpoint (times on its own monotonic clock)."""

    time: float  # wall clock when the request arrived (epoch seconds)
    client: str  # "host:port" of the caller
    path: str  # /v1/chat/completions, /v1/completions, /v1/embeddings
    model: str | None
    status: int  # the engine's status, or the endpoint's own refusal (400/401/404/503)
    stream: bool
    prompt_tokens: int | None = None
    output_tokens: int | None = None
    tokens_from: str | None = None  # "usage", "timings" (llama.cpp) or "chunks" (counted)
    ttft_s: float | None = None  # request in -> first streamed event (or whole answer) out
    decode_tps: float | None = None  # (output tokens - 1) / first event to last event
    duration_s: float | None = None
    engine: str | None = None  # the engine it went to
    error: str | None = None  # why the endpoint refused or the forward failed
    waited_s: float | None = None  # time spent waiting for a switch (switching.py)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


class RequestLog:
    """Appends records to `requests.jsonl` in the data dir; rotates at MAX_BYTES."""

    def __init__(self, path: Path | None = None, max_bytes: int = MAX_BYTES) -> None:
        self.path = path or paths.data_dir() / LOG_NAME
        self.max_bytes = max_bytes
        self._lock = threading.Lock()
        self.unwritten = 0  # lines a full disk (or another write error) kept out
        self.last_error: str | None = None

    def append(self, record: RequestRecord) -> bool:
        """Append one whole line; False when the data dir could not take it (a full disk:
        the line is dropped whole, counted in `unwritten`, and the next one lands intact)."""
        line = json.dumps(record.to_dict(), separators=(",", ":")) + "\n"
        with self._lock:
            try:
                paths.ensure_dir(self.path.parent)
                try:
                    size = self.path.stat().st_size
                except FileNotFoundError:
                    size = 0
                if size and size + len(line) > self.max_bytes:
                    os.replace(self.path, self.path.with_name(self.path.name + ".1"))
                # one write() of the whole line, cut back if short (sparkdeck.config.paths):
                # a reader never sees half a record, and none swallows the next
                fd = open_for_append(self.path)
                try:
                    append_whole(fd, line.encode())
                finally:
                    os.close(fd)
            except OSError as exc:  # runs in an executor nobody awaits: counted, not raised
                self.unwritten += 1
                self.last_error = exc.strerror or str(exc)
                return False
        return True

    def read(self, since: float | None = None) -> Iterator[dict[str, Any]]:
        """Records oldest first (the rotated file, then the current one), newer than `since`
        (epoch seconds). A line that does not parse (a crash mid-write) is skipped."""
        for path in (self.path.with_name(self.path.name + ".1"), self.path):
            try:
                text = path.read_text(encoding="utf-8", errors="replace")
            except FileNotFoundError:
                continue
            for line in text.splitlines():
                try:
                    row = json.loads(line)
                except ValueError:
                    continue
                if not isinstance(row, dict):
                    continue
                if since is not None and not (
                    isinstance(row.get("time"), (int, float)) and row["time"] >= since
                ):
                    continue
                yield row
