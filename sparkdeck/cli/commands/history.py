"""`sparkdeck history [--since 10m] [--json]` and `sparkdeck history --last-crash`.

Reads the flight recording (sparkdeck.recorder) that the service writes, read-only and
while it is being written. A long window is shown as at most --lines lines, each the worst
reading of its slice (least MemAvailable, then most stall), so a dip is never averaged away.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from sparkdeck.cli.commands import CommandFailed
from sparkdeck.host.meminfo import gib
from sparkdeck.recorder.query import (
    last_postmortem,
    parse_duration,
    rows_between,
    summarise,
    worst_per_slice,
)
from sparkdeck.recorder.rows import RecordedSample
from sparkdeck.recorder.store import RecorderError, default_path

HEADERS = (
    "time",
    "available",
    "avail %",
    "PSI some",
    "PSI full",
    "GPU W",
    "util",
    "SM MHz",
    "throttle",
    "engine",
    "tok/s",
)


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "history",
        help="what the flight recorder kept: memory, PSI, GPU and the engine over "
        "a window, or the post-mortem of the last unclean end",
    )
    parser.add_argument(
        "--since", default="10m", metavar="AGE", help="how far back: 90s, 10m, 2h, 7d (default 10m)"
    )
    parser.add_argument(
        "--last-crash",
        action="store_true",
        help="the post-mortem of the last run that did not end cleanly",
    )
    parser.add_argument("--json", action="store_true", help="machine-readable output")
    parser.add_argument(
        "--lines",
        type=int,
        default=30,
        metavar="N",
        help="most table lines for a long window (default 30)",
    )
    parser.add_argument(
        "--db",
        type=Path,
        default=None,
        metavar="PATH",
        help="a recording other than the data dir's",
    )
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    path = args.db or default_path()
    try:
        if args.last_crash:
            return _last_crash(path, args.json)
        try:
            seconds = parse_duration(args.since)
        except ValueError as exc:
            raise CommandFailed(f"--since: {exc}") from None
        if args.lines < 1:
            raise CommandFailed(f"--lines must be at least 1, not {args.lines}")
        rows = rows_between(path, time.time() - seconds)
    except RecorderError as exc:
        raise CommandFailed(str(exc)) from None
    if args.json:
        print(
            json.dumps({"path": str(path), "since_s": seconds, "rows": [r.to_dict() for r in rows]})
        )
        return 0
    _print_window(path, rows, args.since, args.lines)
    return 0


def _last_crash(path: Path, as_json: bool) -> int:
    found = last_postmortem(path)
    if found is None:
        if as_json:
            print(json.dumps({"postmortem": None}))
        else:
            print("no unclean end on record: every recording so far stopped cleanly")
        return 0
    postmortem, file = found
    if as_json:
        print(json.dumps({"postmortem": postmortem.to_dict(), "file": file}))
    else:
        print(postmortem.text())
        print(f"(written to {file})")
    return 0


def _at(t: float) -> str:
    return time.strftime("%H:%M:%S", time.localtime(t))


def _num(value: float | None, digits: int = 0) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def _cells(row: RecordedSample) -> tuple[str, ...]:
    return (
        _at(row.t),
        "-" if row.mem_available is None else gib(row.mem_available),
        _num(row.available_pct),
        _num(row.psi_some_avg10, 1),
        _num(row.psi_full_pct, 1),
        _num(row.gpu_power_w),
        _num(row.gpu_util),
        _num(row.gpu_sm_mhz),
        row.throttle or "-",
        row.engine_state or "-",
        _num(row.tok_s, 1),
    )


def _print_window(path: Path, rows: list[RecordedSample], since: str, lines: int) -> None:
    if not rows:
        print(f"nothing recorded in the last {since} ({path})")
        return
    summary = summarise(rows)
    shown = worst_per_slice(rows, lines)
    print(
        f"{summary.rows} readings from {_at(rows[0].t)} to {_at(rows[-1].t)} ({path})"
        + (
            ""
            if len(shown) == len(rows)
            else f"; each line the worst of ~{len(rows) / len(shown):.0f} readings"
        )
    )
    table = [HEADERS, *(_cells(r) for r in shown)]
    widths = [max(len(line[i]) for line in table) for i in range(len(HEADERS))]
    for line in table:
        print(
            "  ".join(
                cell.ljust(w) if i in (0, 8, 9) else cell.rjust(w)
                for i, (cell, w) in enumerate(zip(line, widths, strict=False))
            ).rstrip()
        )
    low, stall = summary.min_available, summary.max_psi_full
    if low is not None and low.mem_available is not None:
        print(
            f"lowest MemAvailable {gib(low.mem_available)} at {_at(low.t)}"
            + (f" ({low.engine_state})" if low.engine_state else "")
        )
    if stall is not None:
        print(f"highest PSI full {_num(stall.psi_full_pct, 1)} % at {_at(stall.t)}")
    if summary.throttled_rows:
        print(
            f"GPU throttled ({', '.join(summary.throttle)}) in {summary.throttled_rows} of "
            f"{summary.rows} readings"
        )
