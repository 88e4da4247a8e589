"""The scriptable command line: `sparkdeck COMMAND ...`; with no command it opens the TUI.

Exit codes: 0 success, 1 failure, 2 usage error (argparse's own). Errors are printed as one
clear message on stderr; `--json` output goes to stdout and is stable for scripts.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from sparkdeck import __version__
from sparkdeck.catalog import PresetCatalog, load_catalog
from sparkdeck.cli import commands
from sparkdeck.cli.commands import endpoint_args
from sparkdeck.cli.commands.engine import cmd_launch, cmd_stop
from sparkdeck.cli.output import (
    print_failure_log,
    print_presets,
    print_status,
)
from sparkdeck.config import paths
from sparkdeck.config.file_lock import LockBusy
from sparkdeck.config.settings import SettingsError, load_settings
from sparkdeck.endpoints import AttachedRegistry, EndpointError, check, endpoint_for, resolve
from sparkdeck.engines import KINDS
from sparkdeck.guard.own_memory import settle_orphans
from sparkdeck.host.meminfo import MemInfoError, read_meminfo
from sparkdeck.host.nvml import gpu_presence
from sparkdeck.host.pagecache import FlushNotPermitted
from sparkdeck.launch.failure import (
    DoesNotFit,
    GuardStoppedEngine,
    LaunchInterrupted,
    clear_failure,
    last_failure,
)
from sparkdeck.presets import PresetError, load_file
from sparkdeck.runtime import connect
from sparkdeck.runtime.client import DockerRuntime
from sparkdeck.runtime.errors import (
    DockerNotAnswering,
    DockerRuntimeError,
    DockerUnavailable,
)
from sparkdeck.service import ServiceError
from sparkdeck.text_safety import clean

CommandFailed = commands.CommandFailed


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="sparkdeck",
        description="Control panel for inference engines on one NVIDIA DGX Spark. "
        "Without a command, opens the terminal UI.",
    )
    parser.add_argument("--version", action="version", version=f"sparkdeck {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    presets = sub.add_parser("presets", help="list engine presets, or validate preset files")
    presets.add_argument("--json", action="store_true", help="machine-readable output")
    presets_sub = presets.add_subparsers(dest="presets_command", metavar="validate")
    validate = presets_sub.add_parser(
        "validate", help="check preset files (exit 1 if any is invalid)"
    )
    validate.add_argument(
        "files",
        nargs="*",
        type=Path,
        help="files to check (default: every bundled and user preset)",
    )

    launch = sub.add_parser("launch", help="launch a preset (stops the running engine first)")
    launch.add_argument("preset", help="preset id (see `sparkdeck presets`)")
    launch.add_argument(
        "--no-flush", action="store_true", help="do not drop the page cache before starting"
    )
    launch.add_argument(
        "--yes", "-y", action="store_true", help="stop a running engine without asking"
    )
    launch.add_argument(
        "--timeout",
        type=float,
        metavar="S",
        help="seconds to wait for the engine to be ready (default: preset's)",
    )
    launch.add_argument(
        "--force",
        action="store_true",
        help="launch even when the memory fit check says it does not fit",
    )
    launch.add_argument(
        "--no-switch-wait",
        action="store_true",
        help="do not wait for the stopped engine's memory to come back (risky)",
    )

    stop = sub.add_parser("stop", help="stop the engine sparkdeck started")
    stop.add_argument(
        "--grace",
        type=float,
        default=30.0,
        metavar="S",
        help="seconds between SIGTERM and SIGKILL (default 30)",
    )

    sub.add_parser("dismiss", help="forget the last failed launch (shown by status until then)")

    status = sub.add_parser("status", help="engine, attached engines, Docker, GPU and memory")
    status.add_argument("--json", action="store_true")
    endpoint_args(status)

    logs = sub.add_parser("logs", help="print the engine container's logs")
    logs.add_argument("-f", "--follow", action="store_true", help="keep printing new lines")
    logs.add_argument(
        "--tail",
        type=int,
        default=100,
        metavar="N",
        help="lines from the end to start with (default 100)",
    )
    logs.add_argument(
        "--last-failure",
        action="store_true",
        help="the engine's last lines kept with the last failed launch",
    )

    attach = sub.add_parser("attach", help="register an engine sparkdeck did not start")
    attach.add_argument("url", help="the server's base URL, e.g. http://127.0.0.1:8000")
    attach.add_argument("--kind", choices=sorted(KINDS), help="engine kind (detected if omitted)")
    attach.add_argument("--name", help="a short name (default: host:port)")

    detach = sub.add_parser("detach", help="forget an attached engine (it keeps running)")
    detach.add_argument("name", help="name or URL given to attach")

    for module in commands.MODULES:
        importlib.import_module(module).register(sub)
    return parser


def _runtime() -> DockerRuntime:
    return connect()


# ----- commands ----------------------------------------------------------------------------


def cmd_presets(args: argparse.Namespace) -> int:
    if args.presets_command == "validate":
        return cmd_validate(args)
    catalog = load_catalog()
    claims = preset_claims(catalog)
    if args.json:
        print(
            json.dumps(
                {
                    "presets": [
                        {**p.summary(), "memory_claim": claims.get(p.id)}
                        for p in catalog.presets.values()
                    ],
                    "problems": [str(p) for p in catalog.problems],
                    "user_dir": str(paths.user_presets_dir()),
                },
                indent=2,
            )
        )
    else:
        print_presets(catalog, paths.user_presets_dir(), claims)
    return 1 if catalog.problems else 0


def preset_claims(catalog: PresetCatalog) -> dict[str, dict[str, Any]]:
    """Each preset's memory claim against this machine's MemTotal ({} when unreadable)."""
    try:
        total, guard = read_meminfo().total, load_settings().guard
    except (MemInfoError, SettingsError):
        return {}
    return {p.id: p.memory_claim(total, guard).to_dict() for p in catalog.presets.values()}


def cmd_validate(args: argparse.Namespace) -> int:
    if not args.files:
        catalog = load_catalog()
        for problem in catalog.problems:
            print(problem, file=sys.stderr)
        print(f"{len(catalog.presets)} preset(s) valid, {len(catalog.problems)} problem(s)")
        return 1 if catalog.problems else 0
    bad = 0
    for path in args.files:
        try:
            preset = load_file(path)
            print(f"{path}: ok ({preset.id}, {preset.kind})")
        except PresetError as exc:
            bad += 1
            print(exc, file=sys.stderr)
    return 1 if bad else 0


def cmd_dismiss(args: argparse.Namespace) -> int:
    """Forget the last failed launch (status and the TUI show it until then)."""
    failure = last_failure()
    clear_failure()
    print(
        f"dismissed: {failure['preset_id']}: {failure['message']}"
        if failure
        else "no launch failure to dismiss"
    )
    return 0


def cmd_status(args: argparse.Namespace) -> int:
    if args.endpoint:
        endpoint = endpoint_for(args.endpoint, args.kind)
        report: dict[str, Any] = {"endpoint": check(endpoint).to_dict()}
    else:
        report = collect_status()
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        print_status(report)
    return 0


def collect_status() -> dict[str, Any]:
    """Everything `status` shows; each part says why it is missing rather than failing."""
    report: dict[str, Any] = {
        "docker": {"available": False, "error": None},
        "engine": None,
        "last_failure": last_failure(),
        "attached": [],
    }
    current = None
    try:
        runtime = _runtime()
        report["docker"]["available"] = True
        current = runtime.current()
        report["engine"] = current.to_dict() if current else None
        # launch records keyed by container id: stale ones dropped, orphans adopted
        settled = settle_orphans(runtime.engines())
        report["adopted"] = list(settled.adopted)
    except DockerRuntimeError as exc:
        report["docker"]["error"] = str(exc)
        report["docker"]["not_answering"] = isinstance(exc, DockerNotAnswering)
    try:
        report["attached"] = [check(e).to_dict() for e in AttachedRegistry().load()]
    except EndpointError as exc:
        report["attached_error"] = str(exc)
    from sparkdeck.service.liveness import guard_report

    engine = current if current is not None and current.alive else None
    report["guard"] = guard_report((engine.preset_id or engine.name) if engine else None)
    resolved = resolve(current)  # the engine chat, metrics and bench would talk to
    report["target"] = {
        "endpoint": resolved.endpoint.to_dict() if resolved.endpoint else None,
        "why_none": resolved.why_none,
    }
    gpu = gpu_presence()
    report["gpu"] = {
        "available": gpu.available,
        "name": gpu.name,
        "driver": gpu.driver,
        "error": gpu.reason,
    }
    try:
        mem = read_meminfo()
        report["memory"] = {
            "total": mem.total,
            "available": mem.available,
            "free": mem.free,
            "cached": mem.cached,
            "swap_total": mem.swap_total,
            "swap_free": mem.swap_free,
        }
    except MemInfoError as exc:
        report["memory"] = {"error": str(exc)}
    return report


def cmd_logs(args: argparse.Namespace) -> int:
    if args.last_failure:  # the failed engine's container is gone: its lines were kept
        return print_failure_log(last_failure())
    runtime = _runtime()
    current = runtime.current()
    if current is None:
        hint = (
            "; the last failed launch's lines: `sparkdeck logs --last-failure`"
            if last_failure()
            else ""
        )
        raise CommandFailed(f"no sparkdeck engine container to show logs of{hint}")
    try:
        for line in runtime.follow_logs(current.container_id, tail=args.tail, follow=args.follow):
            print(clean(line), flush=args.follow)  # the engine's output: shown, not obeyed
    except KeyboardInterrupt:
        pass
    return 0


def cmd_attach(args: argparse.Namespace) -> int:
    endpoint = endpoint_for(args.url, args.kind, name=args.name, source="attached")
    status = check(endpoint)
    AttachedRegistry().add(endpoint)
    health = "healthy" if status.healthy else f"not healthy yet ({status.health_code})"
    models = ", ".join(status.models) or "none listed"
    print(
        f"attached {endpoint.name}: {endpoint.url} as {KINDS[endpoint.kind].title}, "
        f"{health}; models: {models}"
    )
    return 0


def cmd_detach(args: argparse.Namespace) -> int:
    if not AttachedRegistry().remove(args.name):
        raise CommandFailed(f"no attached engine named {args.name!r}")
    print(f"detached {args.name} (the engine itself keeps running)")
    return 0


COMMANDS = {
    "presets": cmd_presets,
    "launch": cmd_launch,
    "stop": cmd_stop,
    "status": cmd_status,
    "logs": cmd_logs,
    "attach": cmd_attach,
    "detach": cmd_detach,
    "dismiss": cmd_dismiss,
}


# Errors a command reports as one line and exit code 1 (anything else is a bug: traceback).
EXPECTED_ERRORS: tuple[type[Exception], ...] = (
    CommandFailed,
    DockerUnavailable,
    DockerRuntimeError,
    EndpointError,
    FlushNotPermitted,
    ServiceError,
    DoesNotFit,
    GuardStoppedEngine,
    SettingsError,
    LockBusy,
    LaunchInterrupted,
)


def main(argv: Sequence[str] | None = None) -> int:
    try:
        try:
            return _run(argv)
        finally:
            sys.stdout.flush()  # a closed pipe shows here at the latest, not at exit
    except BrokenPipeError:
        # the reader left (`sparkdeck logs | head`): nothing more to say to anyone. Python's
        # documented pattern: point stdout at devnull so the flush at exit fails no more.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 1


def _run(argv: Sequence[str] | None) -> int:
    args = _parser().parse_args(argv)
    if args.command is None:
        from sparkdeck.ui.run import run_app  # Textual is loaded only for the TUI

        return run_app()
    handler = getattr(args, "run", None) or COMMANDS[args.command]
    try:
        return handler(args)
    except EXPECTED_ERRORS as exc:
        # messages can quote a server or a file: printed cleaned, never obeyed
        print(f"sparkdeck: {clean(str(exc))}", file=sys.stderr)
        return 1
