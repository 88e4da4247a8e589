"""`sparkdeck launch` and `sparkdeck stop` when the service runs (or, for a launch, once it
has been started): the same plan, confirmation and lines as the in-process launch, but the
service does the work, so the guard goes on after this command ends.

The launch is followed by sparkdeck.service.launch_follow (no line of it can be missed). Ctrl-C
asks the service to cancel the launch and waits for the outcome: the launch sequence then
leaves nothing behind, exactly as in-process, and creates nothing after the cancel. A service
that ends mid-launch, or one whose config or data dir is not this command's, is one line
(CommandFailed), never a traceback.
"""

from __future__ import annotations

import argparse
import sys
import time
from typing import Any

from sparkdeck.cli.commands import CommandFailed
from sparkdeck.cli.output import StopPrinter, confirm
from sparkdeck.endpoint.listener import endpoint_line
from sparkdeck.launch.events import event_from_dict
from sparkdeck.launch.printer import LaunchPrinter
from sparkdeck.launch.stop_countdown import DEFAULT_GRACE_S, Countdown, start_text
from sparkdeck.service.client import (
    ServiceClient,
    ServiceError,
    ensure_running,
    other_dirs,
    running,
)
from sparkdeck.service.launch_follow import follow_launch


def launch(args: argparse.Namespace) -> int:
    client, started = ensure_running()
    with client:
        status = client.status()
        if (mismatch := other_dirs(status)) is not None:  # its presets are not ours
            raise CommandFailed(mismatch)
        if started:
            print(f"started the sparkdeck service (process {status['pid']}): it "
                  "guards the engine after this command ends", flush=True)
            endpoint = status.get("endpoint") or {}
            if not endpoint.get("on", True):  # it runs without it: said now, not in its log
                print(f"sparkdeck: {endpoint_line(endpoint)}", file=sys.stderr, flush=True)
        flush = "no" if args.no_flush else "auto"
        try:
            plan = client.plan(args.preset, flush)
        except ServiceError as exc:
            raise CommandFailed(str(exc)) from None
        print("\n".join(["launch plan:", *(f"  {line}" for line in plan["lines"])]),
              flush=True)
        fit = plan.get("fit")
        if fit is not None and not fit["allowed"] and not args.force:
            raise CommandFailed(
                f"{args.preset} {fit['verdict']}; not launched (the running engine, if any, "
                "keeps running). Pass --force to launch anyway.\n  "
                + "\n  ".join(plan["fit_lines"]))
        if plan["is_switch"] and not args.yes:
            what = ", ".join(f"{e['preset_id']} ({e['image']})" for e in plan["stopping"])
            if not confirm("Continue?"):
                raise CommandFailed(f"not launched: {what} is running; pass --yes to "
                                    "replace it")
        result = _follow_launch(client, args.preset, {
            "flush": flush, "force": args.force, "timeout": args.timeout,
            "skip_switch_wait": args.no_switch_wait})
    if not result["ok"]:
        tail = "\n".join(f"  | {line}" for line in result.get("log_tail") or ())
        cancelled = "cancelled: " if result.get("error_type") == "LaunchInterrupted" else ""
        raise CommandFailed(cancelled + result["error"]
                            + (f"; its last log lines:\n{tail}" if tail else ""))
    engine = result["engine"]
    print(f"the sparkdeck service guards {engine['name']} from now on (`sparkdeck service "
          "status`)")
    return 0


def _follow_launch(client: ServiceClient, preset: str,
                   options: dict[str, Any]) -> dict[str, Any]:
    """The launch's events, as the service sends them, printed by the printer that prints
    an in-process launch (one way to say each step, whichever process runs it)."""
    printer = LaunchPrinter(sys.stdout)

    def show(kind: str, data: dict[str, Any]) -> None:
        if kind == "launch-event":
            printer(event_from_dict(data["event"]))

    print(f"launching {preset} (by the service)", flush=True)

    def interrupted() -> None:
        print("cancelling the launch…", file=sys.stderr, flush=True)

    try:
        return follow_launch(client, preset, options, show, on_interrupt=interrupted)
    except ServiceError as exc:
        raise CommandFailed(str(exc)) from None


def stop(args: argparse.Namespace) -> int | None:
    """Stop through the service when one runs; None when none does (stop in-process)."""
    from sparkdeck.service import location

    client = running() if location.enabled() else None
    if client is None:
        return None
    printer = StopPrinter()
    said: list[str] = []

    def tick(text: str) -> None:  # said only once the stop outlasts a first tick
        if not said:
            said.append(start_text("the engine (by the service)", DEFAULT_GRACE_S))
            print(said[0], flush=True)
        printer.tick(text)

    with client:
        started = time.monotonic()
        try:
            with Countdown(DEFAULT_GRACE_S, tick, printer.every):
                stopped = client.stop()
        except ServiceError as exc:
            raise CommandFailed(str(exc)) from None
    if said:  # the service stops with its own grace (30 s), whatever --grace says
        printer.ended(", ".join(e["preset_id"] or e["name"] for e in stopped) or "the engine",
                      time.monotonic() - started)
    if not stopped:
        print("no sparkdeck engine is running (engines sparkdeck did not start are never "
              "stopped by it)")
    for engine in stopped:
        print(f"stopped and removed {engine['name']} ({engine['preset_id']}) (by the service)")
    return 0
