"""`sparkdeck stop` when the service runs: the service stops the engine (and says so to
every client) while this command counts the grace period down.

(`sparkdeck launch` goes through sparkdeck.service.control, which runs a launch in the
service or, with the service off, in this process, and hands back its typed events.)
"""

from __future__ import annotations

import argparse
import time

from sparkdeck.cli.commands import CommandFailed
from sparkdeck.cli.output import StopPrinter
from sparkdeck.launch.stop_countdown import DEFAULT_GRACE_S, Countdown, start_text
from sparkdeck.service.client import (
    ServiceError,
    running,
)


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
