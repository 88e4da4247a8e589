"""The requests view: the newest rows of the endpoint's request log (time, client, model,
status, tokens, TTFT, decode tok/s, the wait for a switch), newest first.

A thread worker reads the JSONL through the service's own RequestLog every few seconds, and
only when one of its two files changed size or time (a full log is ~8 MB of JSON: parsing it
every few seconds for nothing would be most of the TUI's idle CPU). No prompt or reply text
exists in that log, so none can reach the screen.
"""

from __future__ import annotations

import os
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from textual import work
from textual.app import ComposeResult
from textual.containers import Vertical
from textual.message import Message
from textual.widgets import DataTable, Static
from textual.worker import Worker, get_current_worker

from sparkdeck.endpoint.request_log import RequestLog
from sparkdeck.text_safety import clean
from sparkdeck.ui.messages import report_worker_failure
from sparkdeck.ui.tables import fill_table

REFRESH_S = 3.0
SHOWN = 200  # rows in the table: the newest
# in priority order too: at 80 columns the first six fit; the wait for a switch, the prompt
# size, the client and the error join as room allows
LABELS = ("time", "model", "status", "out", "TTFT ms", "tok/s", "waited s", "in", "client", "error")


def _number(value: Any, spec: str, scale: float = 1.0) -> str:
    """`value` (times `scale`) as `spec` says; "-" for a missing or non-numeric value."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return "-"
    return format(value * scale if scale != 1.0 else value, spec)


def request_cells(row: Mapping[str, Any], now: float) -> list[str]:
    """One log record as the table's cells (a missing or odd field reads "-")."""
    when = row.get("time")
    if isinstance(when, (int, float)):
        fmt = "%H:%M:%S" if now - when < 20 * 3600 else "%m-%d %H:%M"
        shown = time.strftime(fmt, time.localtime(when))
    else:
        shown = "-"
    waited = row.get("waited_s")
    return [
        shown,
        clean(str(row.get("model") or "-")),
        _number(row.get("status"), ""),
        _number(row.get("output_tokens"), ""),
        _number(row.get("ttft_s"), ".0f", 1000),
        _number(row.get("decode_tps"), ".1f"),
        _number(waited, ".1f") if waited else "-",
        _number(row.get("prompt_tokens"), ""),
        clean(str(row.get("client") or "-")),
        clean(str(row.get("error") or "")),
    ]


def _arrival(row: Mapping[str, Any]) -> float:
    when = row.get("time")
    return float(when) if isinstance(when, (int, float)) else 0.0


def log_stamp(log: RequestLog) -> tuple[tuple[int, int], ...]:
    """(size, mtime) of the log and its rotated file: a change means new rows."""
    stamp = []
    for path in (log.path.with_name(log.path.name + ".1"), log.path):
        try:
            info = os.stat(path)
            stamp.append((info.st_size, info.st_mtime_ns))
        except FileNotFoundError:
            stamp.append((-1, 0))
    return tuple(stamp)


class RequestsPane(Vertical):
    """The table and a line saying how many requests the log holds and where it is."""

    @dataclass
    class Read(Message):
        rows: list[dict[str, Any]]  # newest first, at most SHOWN
        total: int

        def can_replace(self, message: Message) -> bool:
            return isinstance(message, RequestsPane.Read)  # only the newest matters

    def __init__(
        self, log_path: Path | None = None, refresh_s: float = REFRESH_S, **kwargs: Any
    ) -> None:
        super().__init__(**kwargs)
        self.request_log = RequestLog(log_path)
        self._refresh_s = refresh_s
        self._stamp: tuple[tuple[int, int], ...] | None = None
        self._rows: list[dict[str, Any]] = []

    def compose(self) -> ComposeResult:
        yield Static(f"reading {self.request_log.path}…", id="requests-status", markup=False)
        yield DataTable(id="requests-table", cursor_type="row", zebra_stripes=True)

    def on_mount(self) -> None:
        self.read_log()
        self.set_interval(self._refresh_s, self.read_log, name="request log refresh")

    @work(
        thread=True,
        exclusive=True,
        group="request-log",
        name="read the request log",
        description="read the endpoint's request log (JSONL)",
        exit_on_error=False,
    )
    def read_log(self) -> None:
        stamp = log_stamp(self.request_log)
        if stamp == self._stamp:
            return
        rows = list(self.request_log.read())
        if not get_current_worker().is_cancelled:
            self._stamp = stamp
            # by arrival, newest first (a record is written when its request ends)
            rows.sort(key=lambda row: _arrival(row), reverse=True)
            self.post_message(self.Read(rows[:SHOWN], len(rows)))

    def on_requests_pane_read(self, message: Read) -> None:
        message.stop()
        self._rows = message.rows
        self.query_one("#requests-status", Static).update(
            f"{message.total} request{'s' * (message.total != 1)} in {self.request_log.path}"
            + (f", the newest {SHOWN} shown" if message.total > SHOWN else "")
            + (" (newest first)" if message.total else ": none forwarded yet")
        )
        self._fill()

    def on_resize(self) -> None:
        self._fill()

    def _fill(self) -> None:
        table = self.query_one(DataTable)
        now = time.time()
        rows: Sequence[list[str]] = [request_cells(row, now) for row in self._rows]
        width = max(self.size.width - 2, 20)  # the scroll bar's room
        fill_table(table, LABELS, rows, [str(i) for i in range(len(rows))], width, LABELS)

    def on_worker_state_changed(self, event: Worker.StateChanged) -> None:
        report_worker_failure(self.app, event)  # a widget's worker states do not bubble
