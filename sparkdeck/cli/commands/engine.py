"""`sparkdeck launch` and `sparkdeck stop`: plan and confirm here, then hand the work to
the engine's owner (sparkdeck.service.control.engine_control: the service, or this process
with the service switched off), printing its typed events as they come."""

from __future__ import annotations

import argparse
import contextlib
import functools
import sys
import threading

from sparkdeck.catalog import load_catalog
from sparkdeck.cli.commands import CommandFailed
from sparkdeck.cli.output import StopPrinter, confirm
from sparkdeck.config.settings import load_settings
from sparkdeck.guard import records
from sparkdeck.launch.failure import DoesNotFit
from sparkdeck.launch.plan import LaunchFlow
from sparkdeck.launch.printer import LaunchPrinter
from sparkdeck.runtime import connect
from sparkdeck.runtime.errors import EngineExited
from sparkdeck.service import ServiceError


def cmd_launch(args: argparse.Namespace) -> int:
    from sparkdeck.service.control import LaunchCancelled, engine_control

    @functools.cache
    def flow() -> LaunchFlow:  # made once; first by engine_control with the service off
        runtime = functools.cache(connect)
        return LaunchFlow(
            runtime, flush=False if args.no_flush else None, guard=load_settings().guard
        )

    try:  # who runs it: the service (started if need be; what keeps it from starting is
        control = engine_control(flow)  # said first), or this process with it switched off
    except ServiceError as exc:
        raise CommandFailed(str(exc)) from None
    with contextlib.closing(control):
        for note in control.notes:
            print(
                note, file=sys.stderr if note.startswith("sparkdeck:") else sys.stdout, flush=True
            )
        catalog = load_catalog()
        try:
            preset = catalog.get(args.preset)
        except KeyError as exc:
            broken = [str(p) for p in catalog.problems if p.path.stem == args.preset]
            raise CommandFailed("\n".join([exc.args[0], *broken])) from None
        plan = flow().plan(preset)  # the same plan the TUI's confirmation shows
        print("\n".join(["launch plan:", *(f"  {line}" for line in plan.lines())]), flush=True)
        if plan.fit is not None and not plan.fit.allowed and not args.force:
            raise DoesNotFit(preset.id, plan.fit)  # before anything is pulled or stopped
        if plan.is_switch and not args.yes:
            what = ", ".join(f"{e.preset_id} ({e.image})" for e in plan.stopping if e.alive)
            if not confirm("Continue?"):
                raise CommandFailed(f"not launched: {what} is running; pass --yes to replace it")
        skip = threading.Event()
        if args.no_switch_wait:
            skip.set()
        if control.by:
            print(f"launching {preset.id} (by {control.by})", flush=True)
        try:
            engine = control.launch(
                plan,
                LaunchPrinter(sys.stdout),
                force=args.force,
                timeout=args.timeout,
                skip=skip,
                on_interrupt=_say_cancelling,
            )
        except EngineExited as exc:
            tail = "\n".join(f"  | {line}" for line in exc.log_tail)
            raise CommandFailed(f"{exc}; its last log lines:\n{tail}") from None
        except LaunchCancelled as exc:
            raise CommandFailed(f"cancelled: {exc}") from None
        except ServiceError as exc:
            raise CommandFailed(str(exc)) from None
        if control.by:
            print(
                f"the sparkdeck service guards {engine.name} from now on (`sparkdeck "
                "service status`)"
            )
    return 0


def _say_cancelling() -> None:
    print("cancelling the launch…", file=sys.stderr, flush=True)


def cmd_stop(args: argparse.Namespace) -> int:
    from sparkdeck.service.control import engine_control

    # the service stops it when it runs (a stop never starts one), else this process
    flow = LaunchFlow(functools.cache(connect), stop_grace=args.grace)
    try:
        with contextlib.closing(engine_control(lambda: flow, start=False)) as control:
            stopped = control.stop(StopPrinter(), args.grace)
    except ServiceError as exc:
        raise CommandFailed(str(exc)) from None
    if not stopped:
        print(
            "no sparkdeck engine is running (engines sparkdeck did not start are never "
            "stopped by it)"
        )
    returning = {r.container_id: r for r in records.load_returning()}
    by = f" (by {control.by})" if control.by else ""
    for engine in stopped:
        print(f"stopped and removed {engine.name} ({engine.preset_id}){by}")
        if engine.container_id in returning:
            held = returning[engine.container_id]
            print(
                f"  it held {held.held / 2**30:.1f} GiB itself ({held.source}); that memory "
                "can take a minute or more to come back; the next launch waits for it"
            )
    return 0
