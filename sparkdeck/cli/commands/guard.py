"""`sparkdeck guard`: the memory watchdog, headless, for the engine sparkdeck runs.

Samples at the running rate from settings.toml (1 Hz by default) and prints each decision;
at a stop threshold it stops sparkdeck's own container (never anyone else's) unless the
guard is in warn-only mode. `--history` lists the actions written to the data dir. With
`--json` every line on stdout is one JSON object (a decision, or an event: a stop attempt, a
note); notes that are not about the watch go to stderr.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import threading
import time
from typing import TYPE_CHECKING

from sparkdeck.cli.commands import CommandFailed
from sparkdeck.config.settings import load_settings
from sparkdeck.guard.policy import Decision
from sparkdeck.guard.readings import HostReadings
from sparkdeck.guard.records import recent_actions
from sparkdeck.guard.stopper import DOCKER_TIMEOUT_S, StopAttempt
from sparkdeck.guard.watchdog import Watchdog
from sparkdeck.runtime import connect
from sparkdeck.runtime.errors import NotManaged
from sparkdeck.service.guard_events import (
    Decided,
    GuardedHere,
    GuardEvent,
    GuardNote,
    GuardSink,
    GuardStopped,
    ReadFailed,
    ServiceDecided,
    ServiceGuards,
    StopTried,
    TakenOver,
)

if TYPE_CHECKING:
    from sparkdeck.runtime.client import DockerRuntime


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "guard", help="run the memory watchdog for the running engine (prints each decision)"
    )
    parser.add_argument(
        "--duration",
        type=float,
        metavar="S",
        help="stop watching after S seconds (default: until Ctrl-C or the engine is gone)",
    )
    parser.add_argument(
        "--history", action="store_true", help="list the watchdog's recorded actions instead"
    )
    parser.add_argument("--json", action="store_true", help="one JSON object per line")
    parser.set_defaults(run=run_guard)


class _Output:
    """Where the guard's lines go: text or JSON lines on stdout, notes on stderr in --json.

    A reader that goes away (`sparkdeck guard | head -1`) ends the watch quietly: the rest
    of stdout goes to /dev/null so Python's own flush at exit raises nothing either."""

    def __init__(self, as_json: bool, done: threading.Event):
        self.as_json = as_json
        self.done = done
        self.closed = False
        self._lock = threading.Lock()  # the watch and _until_gone's thread both write

    def _line(self, text: str) -> None:
        with self._lock:  # whole lines: print's text and newline were two writes, and two
            self._write(text + "\n")  # threads' lines ran together ('{...}{...}', CI)

    def _write(self, text: str) -> None:
        if self.closed:
            return
        try:
            sys.stdout.write(text)
            sys.stdout.flush()
        except BrokenPipeError:
            self.closed = True
            self.done.set()
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, sys.stdout.fileno())
            os.close(devnull)

    def decision(self, decision: Decision) -> None:
        if self.as_json:
            self._line(json.dumps(decision.to_dict()))
        else:
            self._line(f"{time.strftime('%H:%M:%S')} {decision.describe()}")

    def event(self, event: str, text: str, **fields: object) -> None:
        """A stop attempt, a note or an error: a JSON object in --json, else a plain line."""
        if self.as_json:
            self._line(json.dumps({"event": event, "text": text, **fields}))
        else:
            self._line(f"{time.strftime('%H:%M:%S')} {text}")

    def attempt(self, attempt: StopAttempt) -> None:
        self.event("stop attempt", attempt.text, done=attempt.done, killed=attempt.killed)


# how long after a stop attempt an engine found gone is taken for that stop's doing, and
# the guard's own word ("stopped ...") waited for: the service's stop of an engine whose
# removal Docker took longer than an attempt to answer was once said here as "gone", exit 0
STOP_WORD_S = 2 * DOCKER_TIMEOUT_S


def _until_gone(
    runtime: DockerRuntime,
    container_id: str,
    done: threading.Event,
    dog: Watchdog,
    out: _Output,
    last_attempt: list[float],
) -> None:
    """Ends the watch when the engine stops by other means (every 2 s: Docker is not free).

    A daemon that does not answer ends nothing (the engine may well still be running), and
    neither does anything while a stop is still being carried out: this watchdog's own, or
    the service's, whose last attempt (`last_attempt`, its time.monotonic()) came within
    STOP_WORD_S."""
    silent = False
    while not done.wait(2.0):
        try:
            alive = runtime.inspect(container_id).alive
        except NotManaged:  # "no container": it is gone
            alive = False
        except Exception as exc:  # noqa: BLE001 - not answering or unreachable: keep guarding
            if not silent:
                out.event(
                    "docker",
                    f"cannot ask Docker about the engine ({_first_line(exc)}); still guarding it",
                )
            silent = True
            continue
        silent = False
        stopping = dog.stopping is not None or (
            bool(last_attempt) and time.monotonic() - last_attempt[-1] < STOP_WORD_S
        )
        if not alive and not stopping:  # a stop says so itself
            out.event("gone", "the engine is gone: nothing left to guard")
            done.set()


def _first_line(exc: BaseException) -> str:
    return (str(exc) or type(exc).__name__).splitlines()[0][:200]


def _history(as_json: bool) -> int:
    actions = recent_actions()
    if not actions:
        print("no watchdog actions recorded yet", file=sys.stderr if as_json else sys.stdout)
    for action in actions:
        if as_json:
            print(json.dumps({k: v for k, v in action.items() if k != "window"}))
        else:
            note = f" - {action['note']}" if action.get("note") else ""
            print(
                f"{action['at']} {action['action']:15} {action['engine']}: "
                f"{action['decision']['text']}{note} ({action['file']})"
            )
    return 0


def _renderer(
    name: str,
    out: _Output,
    done: threading.Event,
    stopped: list[GuardStopped],
    last_attempt: list[float],
) -> GuardSink:
    """What each guard event prints. While the sparkdeck service answers it guards the
    engine and its decisions are shown (a second watchdog would decide, record and stop
    twice); while it does not, or with it switched off, this command's own watchdog guards
    (EngineControl.guard chooses; the events say who guards now)."""
    errors: list[str] = []

    def on_event(event: GuardEvent) -> None:
        match event:
            case Decided(decision):
                out.decision(decision)
            case ServiceDecided(level=level, text=text):
                out.event("decision", text, level=level)
            case StopTried(attempt):
                out.attempt(attempt)
                last_attempt.append(time.monotonic())  # its word follows: _until_gone waits
            case ReadFailed(error):  # a failed reading: said once, then retried
                text = _first_line(error)
                if not errors or errors[-1] != text:
                    out.event("error", f"watchdog: {text}; trying again")
                errors.append(text)
            case GuardStopped(reasons) as stop:
                out.event("stopped", f"the service stopped {name}: {reasons}")
                stopped.append(stop)  # the command then ends as its own stop would
                done.set()
            case ServiceGuards(text=text) | GuardNote(text=text):
                out.event("note", text)
            case TakenOver(life):
                out.event(
                    "unguarded",
                    f"the sparkdeck service is {life.state} ({life.detail}): "
                    f"this command guards {name} until it answers again",
                    state=life.state,
                )
            case GuardedHere():
                pass  # the first line says this command guards it

    return on_event


def run_guard(args: argparse.Namespace) -> int:
    if args.history:
        return _history(args.json)
    guard = load_settings().guard
    runtime = connect()
    engine = runtime.current()
    if engine is None or not engine.alive:
        raise CommandFailed(
            "no sparkdeck engine is running: nothing to guard (engines "
            "sparkdeck did not start are never stopped by it)"
        )
    done = threading.Event()
    out = _Output(args.json, done)
    if args.duration is not None:
        timer = threading.Timer(args.duration, done.set)
        timer.daemon = True
        timer.start()
    from sparkdeck.service.control import guard_control

    readings = HostReadings()
    control = guard_control()
    by_service: list[GuardStopped] = []
    last_attempt: list[float] = []
    following = control.guard(
        engine,
        runtime,
        guard,
        _renderer(engine.name, out, done, by_service, last_attempt),
        done,
        lambda: guard.running_hz,
        read=readings,
    )
    dog = following.watchdog
    mode = "stops" if guard.mode == "stop" else "only WARNS about (warn-only mode)"
    if not args.json:
        out._line(
            f"guarding {engine.name} ({engine.preset_id}) at {guard.running_hz:g} Hz; "
            f"it {mode} the engine at MemAvailable < {guard.stop_available_pct:g} % or a "
            f"full stall rate > {guard.stop_full_rate_pct:g} % for "
            f"{guard.stop_consecutive} samples"
        )
    threading.Thread(
        target=_until_gone,
        daemon=True,
        args=(
            runtime.with_timeout(DOCKER_TIMEOUT_S),
            engine.container_id,
            done,
            dog,
            out,
            last_attempt,
        ),
    ).start()
    try:
        following.run()
    except KeyboardInterrupt:
        pass
    finally:
        done.set()
        control.close()
    if out.closed:
        return 0
    if readings.psi_error:
        out.event(
            "note", f"note: no PSI on this kernel, the stall rule was off ({readings.psi_error})"
        )
    if by_service:  # the same exit and words whichever watchdog stopped it
        raise CommandFailed(
            f"stopped {engine.name} (the sparkdeck service's watchdog): "
            f"{by_service[0].reasons} (readings saved in {by_service[0].record or '-'})"
        )
    if dog.stopped_by is not None:
        raise CommandFailed(
            f"stopped {engine.name}: {'; '.join(dog.stopped_by.reasons)} "
            f"(readings saved in {dog.stop_record or '-'})"
        )
    if dog.stop_pending:
        raise CommandFailed(
            f"the stop of {engine.name} was not confirmed before the guard "
            f"ended: {dog.attempts[-1].text if dog.attempts else 'not tried'}"
        )
    return 0
