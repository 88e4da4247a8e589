"""`sparkdeck metrics`: the engine's own live numbers, once a second.

Reads the current sparkdeck engine, or any server given with --endpoint (engines sparkdeck
did not start included). `--json` prints one JSON object per sample, one per line.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time

from sparkdeck.cli import _endpoint_args, _runtime
from sparkdeck.commands import CommandFailed
from sparkdeck.endpoints import endpoint_for
from sparkdeck.metrics.reader import MetricsReader
from sparkdeck.metrics.sampler import SAMPLE_PERIOD_S, MetricsPlan, MetricsSampler, plan_for
from sparkdeck.metrics.snapshot import EngineMetrics
from sparkdeck.metrics.text import summary_line
from sparkdeck.presets import load_catalog


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "metrics", help="the engine's live numbers: tok/s, queue, KV cache, TTFT")
    parser.add_argument("--json", action="store_true", help="one JSON object per sample")
    parser.add_argument("--samples", type=int, metavar="N",
                        help="stop after N samples (default: until interrupted)")
    parser.add_argument("--interval", type=float, default=SAMPLE_PERIOD_S, metavar="S",
                        help=f"seconds between samples (default {SAMPLE_PERIOD_S:g})")
    _endpoint_args(parser)
    parser.set_defaults(run=run)


def _plan(args: argparse.Namespace) -> MetricsPlan:
    if args.endpoint:
        endpoint = endpoint_for(args.endpoint, args.kind)
        return plan_for(endpoint.url, endpoint.kind, endpoint.metrics_path)
    engine = _runtime().current()
    if engine is None or not engine.alive:
        raise CommandFailed("no sparkdeck engine is running; pass --endpoint URL for an "
                            "engine sparkdeck did not start")
    preset = load_catalog().presets.get(engine.preset_id)
    return plan_for(engine.base_url, engine.kind, engine.metrics_path, preset)


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
        await MetricsSampler(plan, reader).run(_printer(args.json), samples=args.samples,
                                               period_s=args.interval)
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
        print(f"reading {plan.target.url} ({plan.kind}) every {args.interval:g} s",
              file=sys.stderr)
    try:
        asyncio.run(_sample(plan, args))
    except KeyboardInterrupt:
        pass
    return 0
