"""`sparkdeck guard`: the memory watchdog, headless, for the engine sparkdeck runs.

Samples at the running rate from settings.toml (1 Hz by default) and prints each decision;
at a stop threshold it stops sparkdeck's own container (never anyone else's) unless the
guard is in warn-only mode. `--history` lists the actions written to the data dir.
"""

from __future__ import annotations

import argparse
import json
import threading
import time

from sparkdeck.commands import CommandFailed
from sparkdeck.docker_errors import DockerRuntimeError
from sparkdeck.docker_runtime import DockerRuntime
from sparkdeck.guard.policy import Decision, WatchdogPolicy
from sparkdeck.guard.readings import HostReadings
from sparkdeck.guard.records import recent_actions
from sparkdeck.guard.watchdog import Watchdog
from sparkdeck.settings import load_settings


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "guard", help="run the memory watchdog for the running engine (prints each decision)")
    parser.add_argument("--duration", type=float, metavar="S",
                        help="stop watching after S seconds (default: until Ctrl-C or the "
                             "engine is gone)")
    parser.add_argument("--history", action="store_true",
                        help="list the watchdog's recorded actions instead")
    parser.add_argument("--json", action="store_true", help="one JSON object per line")
    parser.set_defaults(run=run_guard)


def _print(decision: Decision, as_json: bool) -> None:
    if as_json:
        print(json.dumps(decision.to_dict()), flush=True)
    else:
        print(f"{time.strftime('%H:%M:%S')} {decision.describe()}", flush=True)


def _until_gone(runtime: DockerRuntime, container_id: str, done: threading.Event) -> None:
    """Ends the watch when the engine stops by other means (every 2 s: Docker is not free)."""
    while not done.wait(2.0):
        try:
            alive = runtime.inspect(container_id).alive
        except DockerRuntimeError:
            alive = False
        if not alive:
            print("the engine is gone: nothing left to guard", flush=True)
            done.set()


def run_guard(args: argparse.Namespace) -> int:
    if args.history:
        for action in recent_actions():
            if args.json:
                print(json.dumps({k: v for k, v in action.items() if k != "window"}))
            else:
                print(f"{action['at']} {action['action']:10} {action['engine']}: "
                      f"{action['decision']['text']} ({action['file']})")
        return 0
    guard = load_settings().guard
    runtime = DockerRuntime.connect()
    engine = runtime.current()
    if engine is None or not engine.alive:
        raise CommandFailed("no sparkdeck engine is running: nothing to guard (engines "
                            "sparkdeck did not start are never stopped by it)")
    readings = HostReadings()
    dog = Watchdog(WatchdogPolicy(guard), readings,
                   lambda: runtime.stop(engine.container_id, grace=0), engine=engine.name,
                   on_decision=lambda d: _print(d, args.json))
    mode = "stops" if guard.mode == "stop" else "only WARNS about (warn-only mode)"
    if not args.json:
        print(f"guarding {engine.name} ({engine.preset_id}) at {guard.running_hz:g} Hz; it "
              f"{mode} the engine at MemAvailable < {guard.stop_available_pct:g} % or a full "
              f"stall rate > {guard.stop_full_rate_pct:g} % for {guard.stop_consecutive} "
              "samples", flush=True)
    done = threading.Event()
    if args.duration is not None:
        timer = threading.Timer(args.duration, done.set)
        timer.daemon = True
        timer.start()
    threading.Thread(target=_until_gone, args=(runtime, engine.container_id, done),
                     daemon=True).start()
    try:
        dog.run(done, lambda: guard.running_hz)
    except KeyboardInterrupt:
        pass
    finally:
        done.set()
    if readings.psi_error and not args.json:
        print(f"note: no PSI on this kernel, the stall rule was off ({readings.psi_error})")
    if dog.stopped_by is not None:
        raise CommandFailed(f"stopped {engine.name}: {'; '.join(dog.stopped_by.reasons)} "
                            f"(readings saved in {dog.records[0] if dog.records else '-'})")
    return 0
