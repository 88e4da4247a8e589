"""`sparkdeck metrics`: the engine's own live numbers, once a second.

Reads the server given with --endpoint, else the current sparkdeck engine, else the one
attached engine (`sparkdeck attach`); one without a metrics endpoint is named as such.
`--json` prints one JSON object per sample, one per line; a reading whose scrape was slow
(or given up) carries `late: true`, and the text line says `[late: ...]`.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time

from sparkdeck.catalog import load_catalog
from sparkdeck.cli.commands import CommandFailed, endpoint_args
from sparkdeck.endpoints import EndpointError, resolve_endpoint
from sparkdeck.engines import get_kind
from sparkdeck.metrics.reader import MetricsReader
from sparkdeck.metrics.sampler import SAMPLE_PERIOD_S, MetricsPlan, MetricsSampler
from sparkdeck.metrics.snapshot import EngineMetrics
from sparkdeck.metrics.text import summary_line


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "metrics", help="the engine's live numbers: tok/s, queue, KV cache, TTFT"
    )
    parser.add_argument("--json", action="store_true", help="one JSON object per sample")
    parser.add_argument(
        "--samples", type=int, metavar="N", help="stop after N samples (default: until interrupted)"
    )
    parser.add_argument(
        "--interval",
        type=float,
        default=SAMPLE_PERIOD_S,
        metavar="S",
        help=f"seconds between samples (default {SAMPLE_PERIOD_S:g})",
    )
    endpoint_args(parser)
    parser.set_defaults(run=run)


def _plan(args: argparse.Namespace) -> MetricsPlan:
    """--endpoint, else sparkdeck's running engine, else the one attached engine (as chat and
    bench choose)."""
    try:
        endpoint = resolve_endpoint(args.endpoint, args.kind, "read metrics from")
    except EndpointError as exc:
        raise CommandFailed(str(exc)) from None
    preset = load_catalog().presets.get(endpoint.preset_id) if endpoint.preset_id else None
    return get_kind(endpoint.kind).metrics_plan(endpoint.url, endpoint.metrics_path, preset)


def _printer(as_json: bool):
    def show(metrics: EngineMetrics) -> None:
        if as_json:
            print(json.dumps(metrics.to_dict()), flush=True)
        else:
            stamp = time.strftime("%H:%M:%S", time.localtime(metrics.wall))
            print(f"{stamp}  {summary_line(metrics)}", flush=True)

    return show


async def _sample(plan: MetricsPlan, args: argparse.Namespace) -> None:
    reader = MetricsReader()
    try:
        await MetricsSampler(plan, reader).run(
            _printer(args.json), samples=args.samples, period_s=args.interval
        )
    finally:
        await reader.aclose()


def run(args: argparse.Namespace) -> int:
    if args.samples is not None and args.samples < 1:
        raise CommandFailed("--samples must be at least 1")
    if args.interval <= 0:
        raise CommandFailed("--interval must be above 0")
    plan = _plan(args)
    if plan.target is None:
        raise CommandFailed(plan.why_none or "nothing to read")
    if not args.json:
        print(f"reading {plan.target.url} ({plan.kind}) every {args.interval:g} s", file=sys.stderr)
    try:
        asyncio.run(_sample(plan, args))
    except KeyboardInterrupt:
        pass
    return 0
