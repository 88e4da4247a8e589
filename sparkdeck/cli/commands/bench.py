"""`sparkdeck bench`: benchmark the running engine and keep the results.

`sparkdeck bench [--json] [--concurrency 1,2,4,8] [--prompt-tokens N] [--output-tokens M]
[--runs K] [--endpoint URL --kind K]` measures TTFT, prefill and decode per request and in
total at each concurrency level, records memory and pressure, and stores everything with
the launch fingerprint. `bench history` lists stored runs; `bench export csv|json` writes
them out. Progress goes to stderr (never into --json output).
"""

from __future__ import annotations

import argparse
import functools
import json
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any

from sparkdeck.bench import report
from sparkdeck.bench.outcome import DEFAULT_CONCURRENCY, BenchConfig, BenchProgress
from sparkdeck.bench.prompt import PromptError
from sparkdeck.bench.report import FORMATS
from sparkdeck.bench.session import BenchSession
from sparkdeck.bench.store import BenchStore, BenchStoreError, StoredRun
from sparkdeck.bench.target import NoBenchTarget
from sparkdeck.cli.commands import CommandFailed, endpoint_args
from sparkdeck.config.paths import atomic_write_text


def _levels(text: str) -> tuple[int, ...]:
    try:
        levels = tuple(int(part) for part in text.split(",") if part.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: give levels like 1,2,4,8") from None
    if not levels or min(levels) < 1:
        raise argparse.ArgumentTypeError(f"{text!r}: levels must be whole numbers >= 1")
    return levels


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"{text!r} must not be negative")
    return value


def register(subparsers: Any) -> None:

    bench = subparsers.add_parser(
        "bench", help="benchmark the running engine (TTFT, prefill, decode, concurrency)"
    )
    bench.add_argument("--json", action="store_true", help="machine-readable output")
    bench.add_argument(
        "--concurrency",
        type=_levels,
        default=DEFAULT_CONCURRENCY,
        metavar="1,2,4,8",
        help="requests sent together, per level",
    )
    bench.add_argument(
        "--prompt-tokens",
        type=_positive,
        default=512,
        metavar="N",
        help="prompt size in the server's tokens (default 512)",
    )
    bench.add_argument(
        "--output-tokens",
        type=_positive,
        default=128,
        metavar="M",
        help="tokens generated per request (default 128)",
    )
    bench.add_argument(
        "--runs",
        type=_positive,
        default=3,
        metavar="K",
        help="repeats per level; figures are medians (default 3)",
    )
    bench.add_argument(
        "--warmup",
        type=_positive,
        default=1,
        metavar="W",
        help="unrecorded requests first (default 1)",
    )
    bench.add_argument(
        "--depth",
        type=_positive,
        default=0,
        metavar="D",
        help="context tokens before the prompt (default 0)",
    )
    bench.add_argument(
        "--prefix-cache",
        choices=("on", "off"),
        default="off",
        help="on: requests share the context, cached first; off: nothing shared (default)",
    )
    bench.add_argument("--model", help="model to ask for (default: the first listed)")
    endpoint_args(bench)
    bench.set_defaults(run=cmd_bench)
    sub = bench.add_subparsers(dest="bench_command", metavar="history|export")
    history = sub.add_parser("history", help="list stored benchmark runs")
    history.add_argument("--model", help="only this model")
    history.add_argument("--json", action="store_true")
    history.set_defaults(run=cmd_history)
    export = sub.add_parser("export", help="write stored runs as CSV or JSON")
    export.add_argument("format", choices=sorted(FORMATS))
    export.add_argument("--model", help="only this model")
    export.add_argument("-o", "--output", metavar="FILE", help="file to write (default stdout)")
    export.set_defaults(run=cmd_export)


class ProgressPrinter:
    """One line per step on stderr; on a terminal the line is rewritten in place."""

    def __init__(self, stream: IO[str]):
        self.stream = stream
        self.tty = stream.isatty()

    def __call__(self, p: BenchProgress) -> None:
        if p.phase == "sizing":
            text = "sizing the prompt against the server's token count"
        elif p.phase == "warmup":
            text = "warming up"
        elif p.phase == "measuring":
            run = (p.repeat or 0) + 1
            text = (
                f"concurrency {p.concurrency}, run {run}: {p.requests_done}/"
                f"{p.requests_total} requests done"
            )
        else:
            text = f"done: {p.requests_done}/{p.requests_total} requests"
        end = "\n" if not self.tty or p.phase == "done" else ""
        prefix = "\r\033[K" if self.tty else ""
        print(f"{prefix}bench: {text}", end=end, file=self.stream, flush=True)


def _run_in_thread(session: BenchSession) -> StoredRun:
    """Run in a worker thread so Ctrl-C in the main thread can stop it with a record."""
    box: dict[str, Any] = {}

    def work() -> None:
        try:
            box["run"] = session.run()
        except BaseException as exc:  # noqa: BLE001 - handed to the main thread, which raises it
            box["error"] = exc

    worker = threading.Thread(target=work, name="bench-run", daemon=True)
    worker.start()
    try:
        while worker.is_alive():
            worker.join(0.2)
    except KeyboardInterrupt:
        session.cancel("interrupted (Ctrl-C)")
        worker.join()
    if "error" in box:
        raise box["error"]
    return box["run"]


def _as_command_failure(
    func: Callable[[argparse.Namespace], int],
) -> Callable[[argparse.Namespace], int]:
    """Report the benchmark's own expected errors as one line and exit code 1."""

    @functools.wraps(func)
    def wrapper(args: argparse.Namespace) -> int:
        try:
            return func(args)
        except (NoBenchTarget, BenchStoreError, PromptError) as exc:
            raise CommandFailed(str(exc)) from None

    return wrapper


@_as_command_failure
def cmd_bench(args: argparse.Namespace) -> int:
    try:
        config = BenchConfig(
            prompt_tokens=args.prompt_tokens,
            output_tokens=args.output_tokens,
            concurrency=args.concurrency,
            runs=args.runs,
            warmup=args.warmup,
            depth_tokens=args.depth,
            prefix_cache=args.prefix_cache == "on",
            model=args.model,
        )
    except ValueError as exc:
        raise CommandFailed(str(exc)) from None
    session = BenchSession(
        config,
        url=args.endpoint,
        kind=args.kind,
        on_progress=(None if args.json else ProgressPrinter(sys.stderr)),
    )
    session.prepare()
    stored = _run_in_thread(session)
    run_id, store = stored.id, session.store
    if args.json:
        print(json.dumps({**stored.to_dict(), "store": str(store.path)}, indent=2))
    else:
        report.print_run(stored, sys.stdout)
        print(f"saved as run {run_id} in {store.path}")
    if stored.status == "unreliable":  # measured to the end: the figures stay, with a caveat
        print(f"warning: the decode figures are unreliable: {stored.reason}", file=sys.stderr)
        return 0
    if stored.status != "complete":
        raise CommandFailed(
            f"benchmark {stored.status}: {stored.reason}; what was measured "
            f"is saved as run {run_id}"
        )
    return 0


@_as_command_failure
def cmd_history(args: argparse.Namespace) -> int:
    store = BenchStore()
    store.end_stale_runs()  # runs killed mid-way read as ended, not "running" forever
    runs = store.runs(args.model)
    if args.json:
        print(json.dumps({"runs": [r.to_dict() for r in runs]}, indent=2))
    else:
        report.print_history(runs, sys.stdout)
    return 0


@_as_command_failure
def cmd_export(args: argparse.Namespace) -> int:
    text = FORMATS[args.format](BenchStore().runs(args.model, limit=100_000))
    if args.output:
        atomic_write_text(Path(args.output), text)  # private, like the history it comes from
        print(f"wrote {args.output}", file=sys.stderr)
    else:
        sys.stdout.write(text)
    return 0
