"""`sparkdeck telemetry [--json] [--samples N]`: what the memory, PSI and GPU panels show.

Samples once a second (the panels' rate), so the PSI stall rate, which needs two readings,
is there from the second sample on. `--json` prints one JSON object per line per sample.
"""

from __future__ import annotations

import argparse
import json
import time

from sparkdeck.cli.commands import CommandFailed
from sparkdeck.telemetry.sampler import TelemetrySampler
from sparkdeck.telemetry.view import text_report

INTERVAL_S = 1.0


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "telemetry",
        help="unified memory, memory pressure, GPU and power rails, as the panels show them",
    )
    parser.add_argument("--json", action="store_true", help="one JSON object per sample")
    parser.add_argument(
        "--samples",
        type=int,
        default=1,
        metavar="N",
        help="how many samples, one a second (default 1)",
    )
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    if args.samples < 1:
        raise CommandFailed(f"--samples must be at least 1, not {args.samples}")
    sampler = TelemetrySampler()
    try:
        for index in range(args.samples):
            if index:
                time.sleep(INTERVAL_S)
            snapshot = sampler.sample()
            if args.json:
                print(json.dumps(snapshot.to_dict()), flush=True)
            else:
                if index:
                    print()
                print(text_report(snapshot), flush=True)
    except KeyboardInterrupt:
        pass
    finally:
        sampler.close()
    return 0
