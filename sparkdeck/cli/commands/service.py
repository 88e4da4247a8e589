"""`sparkdeck service run|start|stop|status|install`: the long-running owner of the engine.

`run` serves in the foreground (what systemd and `start` run); `start` starts it detached;
`stop` ends it (the engine keeps running and the next service adopts it; while none runs
nothing guards the engine, and `stop` says so); `status` says whether it runs, what it
guards and what it last decided; `install` writes a systemd unit and says how to enable it.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import time
from typing import Any

from sparkdeck.cli.commands import CommandFailed


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "service", help="the background service that owns the engine and guards memory"
    )
    sub = parser.add_subparsers(
        dest="service_command", metavar="run|start|stop|status|install", required=True
    )
    sub.add_parser("run", help="serve in the foreground (systemd runs this)")
    sub.add_parser("start", help="start the service in the background")
    stop = sub.add_parser("stop", help="stop the service (the engine keeps running)")
    stop.add_argument("--timeout", type=float, default=10.0, metavar="S")
    status = sub.add_parser("status", help="whether it runs, what it guards")
    status.add_argument("--json", action="store_true")
    install = sub.add_parser("install", help="write a systemd unit for the service")
    install.add_argument(
        "--system",
        action="store_true",
        help="a system unit (root-owned setups) instead of a user unit",
    )
    parser.set_defaults(run=run_service)


def run_service(args: argparse.Namespace) -> int:
    return {"run": _run, "start": _start, "stop": _stop, "status": _status, "install": _install}[
        args.service_command
    ](args)


def _run(args: argparse.Namespace) -> int:
    from sparkdeck.service.server import serve

    return serve()


def _start(args: argparse.Namespace) -> int:
    from sparkdeck.service.client import ensure_running

    client, started = ensure_running()
    with client:
        status = client.status()
    print(
        f"the sparkdeck service {'started' if started else 'already runs'} (process "
        f"{status['pid']})"
    )
    _print_service_notes(status, warnings_only=True)
    return 0


def _print_service_notes(status: dict, warnings_only: bool = False) -> None:
    """What the service itself says of its endpoint, and a config or data dir that is not
    this command's (its presets and records are then not the ones this command sees).
    `warnings_only`: only what is wrong, on stderr (`start` keeps stdout to its one line)."""
    import sys

    from sparkdeck.endpoint.listener import endpoint_line
    from sparkdeck.service.client import other_dirs

    endpoint = status.get("endpoint") or {}
    line = endpoint_line(endpoint)
    if warnings_only:
        for problem in (line if not endpoint.get("on", True) else None, other_dirs(status)):
            if problem is not None:
                print(f"sparkdeck: {problem}", file=sys.stderr)
        return
    if line is not None:
        print(f"endpoint: {line.removeprefix('the OpenAI endpoint is ')}")
    if (mismatch := other_dirs(status)) is not None:
        print(f"dirs:    {mismatch}")


def _holder_pid() -> int | None:
    from sparkdeck.service.liveness import lock_holder

    return lock_holder()


def _stop(args: argparse.Namespace) -> int:
    pid = _holder_pid()
    if pid is None:
        print("the sparkdeck service is not running")
        return 0
    os.kill(pid, signal.SIGTERM)
    os.kill(pid, signal.SIGCONT)  # a stopped (SIGSTOP) service resumes only to end cleanly
    deadline = time.monotonic() + args.timeout
    while time.monotonic() < deadline:
        if _holder_pid() is None:
            print(
                f"stopped the sparkdeck service (process {pid}); an engine that runs keeps "
                "running, unguarded until the service or a sparkdeck window runs again"
            )
            return 0
        time.sleep(0.1)
    raise CommandFailed(f"the service (process {pid}) did not stop within {args.timeout:g} s")


def _status(args: argparse.Namespace) -> int:
    from sparkdeck.service.client import running
    from sparkdeck.service.liveness import NOT_ANSWERING, probe

    life = probe()  # within liveness.HEARTBEAT_S, whatever state the service is in
    client = running() if life.answering else None
    if client is None:
        if args.json:
            print(
                json.dumps(
                    {"running": False, "stale_holder": _holder_pid(), "liveness": life.to_dict()}
                )
            )
        elif life.state == NOT_ANSWERING:
            print(
                f"the sparkdeck service is NOT ANSWERING: {life.detail}. It guards no "
                "engine meanwhile: an open sparkdeck window or `sparkdeck guard` takes "
                "over; `kill -CONT` a stopped one, or `sparkdeck service stop` ends it"
            )
        else:
            print(
                f"the sparkdeck service is not running ({life.detail}; `sparkdeck service start`)"
            )
        # like systemctl status: 3 not running; 4 there but not answering (nothing guards)
        return 4 if life.state == NOT_ANSWERING else 3
    with client:
        report: dict[str, Any] = {"running": True, **client.status()}
    if args.json:
        print(json.dumps(report, indent=2))
        return 0
    guard = report["guard"]
    engine = report.get("engine")
    print(f"the sparkdeck service runs (process {report['pid']}, API v{report['api_version']})")
    if engine:
        state = "ready" if report.get("ready") else engine.get("docker_state")
        print(f"engine:  {engine['preset_id']} ({engine['name']}), {state}")
    else:
        print("engine:  none")
    if guard.get("guarding"):
        last = (guard.get("last_decision") or {}).get("text", "no reading yet")
        print(
            f"guard:   watching {guard['guarding']} at {guard['hz']:g} Hz ({guard['mode']}); "
            f"last: {last}"
        )
    else:
        print("guard:   idle (no sparkdeck engine runs)")
    stop = guard.get("last_stop")  # kept by the service: a full disk may hold its record
    if stop:
        print(
            f"stop:    {stop['at']} the guard {'stopped' if stop['done'] else 'is STOPPING'} "
            f"{stop['preset_id'] or stop['engine']}: {'; '.join(stop['reasons'])} "
            f"({stop['result']}; record: {stop['record'] or '-'}"
            f"{'' if stop['record_written'] else ', not written yet'})"
        )
    for held in guard.get("unwritten") or ():
        print(
            f"unwritten: {held['at']} {held['action']} {held['engine']} "
            f"({held['not_written']}; kept in memory until the data dir has room)"
        )
    if report.get("busy"):
        print(f"busy:    {report['busy']}")
    _print_service_notes(report)
    if report.get("docker_error"):
        print(f"docker:  {report['docker_error']}")
    return 0


def _install(args: argparse.Namespace) -> int:
    from sparkdeck.service.unit import install

    installed = install(args.system)
    print(f"wrote {installed.path} ({installed.note}); enable it with:")
    for command in installed.enable:
        print(f"  {'sudo ' if args.system and os.getuid() != 0 else ''}{command}")
    return 0
