"""How the CLI shows things to a person: launch progress, preset lists, status, prompts."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any, TextIO

from sparkdeck.catalog import PresetCatalog
from sparkdeck.host.meminfo import gib
from sparkdeck.launch.events import (
    LaunchEvent,
    PreviousStopped,
    PreviousStopping,
)
from sparkdeck.launch.failure import STATUS_LOG_LINES, failure_log, failure_text
from sparkdeck.launch.listener import LaunchListener
from sparkdeck.launch.stop_countdown import DEFAULT_GRACE_S, Countdown, end_text, start_text
from sparkdeck.text_safety import clean


def confirm(question: str) -> bool:
    """Ask on a terminal; without one, the answer is no (scripts pass --yes)."""
    if not sys.stdin.isatty():
        return False
    try:
        answer = input(f"{question} [y/N] ")
    except EOFError:
        return False
    return answer.strip().lower() in ("y", "yes")


def claim_cell(claim: dict[str, Any] | None) -> str:
    """A claim as the CLAIM column shows it: GiB (~ when part is an estimate), or "?"."""
    if not claim or claim.get("bytes") is None:
        return "?"
    return ("~" if claim.get("estimated") else "") + f"{claim['bytes'] / 2**30:.1f} GiB"


def print_presets(
    catalog: PresetCatalog, user_dir: Path, claims: dict[str, dict[str, Any]] | None = None
) -> None:
    """The preset table: the memory claim in GiB, the engine's own memory setting apart."""
    claims = claims or {}
    header = ("ID", "KIND", "CLAIM", "MEMORY SETTING", "IMAGE")
    rows = [
        (p.id, p.kind, claim_cell(claims.get(p.id)), p.memory_setting(), p.image)
        for p in catalog.presets.values()
    ]
    widths = [max([len(h)] + [len(r[i]) for r in rows]) for i, h in enumerate(header)]
    for row in [header, *rows]:
        print("  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=False)).rstrip())
    if claims:
        print("\nhow each claim was reckoned on this machine (CLAIM ? = cannot be known):")
        for preset_id, claim in claims.items():
            print(f"  {preset_id}: {claim['text']}")
    print(f"\nuser presets: {user_dir} (a file there with the same id replaces a bundled one)")
    for problem in catalog.problems:
        print(f"invalid: {problem}", file=sys.stderr)


def print_status(report: dict[str, Any]) -> None:
    if "endpoint" in report:
        _print_endpoint(report["endpoint"])
        return
    docker = report["docker"]
    missing = "NOT ANSWERING" if docker.get("not_answering") else "MISSING"
    print("docker:  " + ("available" if docker["available"] else f"{missing} - {docker['error']}"))
    engine = report.get("engine")
    if engine:
        if engine["docker_state"] in ("exited", "dead"):
            print(
                f"engine:  {engine['preset_id']} CRASHED (exit code {engine['exit_code']}); "
                "last log lines:"
            )
            for line in engine["log_tail"][-10:]:
                print(f"  | {clean(line)}")
        else:
            print(
                f"engine:  {engine['preset_id']} {engine['docker_state']} at "
                f"{engine['base_url']} ({engine['image']})"
            )
            if engine.get("published_on") in ("0.0.0.0", "::"):
                port = engine["base_url"].rsplit(":", 1)[-1]
                print(
                    f"WARNING: also reachable from the LAN: published on "
                    f"{engine['published_on']}:{port} (lan = true in the preset); anyone "
                    "who can reach this machine can use the engine, with no key"
                )
    elif docker["available"]:
        print("engine:  none running")
    guard = report.get("guard") or {}
    if guard.get("line"):
        print(f"guard:   {guard['line']}")
    for container_id in report.get("adopted", []):
        print(
            f"adopted: {container_id[:12]} was running with no launch in progress and no "
            "record (its launch was killed?); sparkdeck now follows it (the TUI and "
            "`sparkdeck guard` guard it; the next launch stops it)"
        )
    failure = report.get("last_failure")
    if failure:  # shown until dismissed, even beside a running engine (one left by Ctrl-C)
        print(
            f"last launch failed: {clean(str(failure['preset_id']))}: "
            f"{clean(str(failure['message']))} ({failure.get('at', '')}; "
            "`sparkdeck dismiss` forgets it)"
        )
        log = failure_log(failure)
        if log:  # the engine's own words are usually the reason ("invalid argument: ...")
            shown = log[-STATUS_LOG_LINES:]
            more = (
                f" (the last {len(shown)} of {len(log)}: `sparkdeck logs --last-failure`)"
                if len(log) > len(shown)
                else ""
            )
            print(f"  the engine's last log lines{more}:")
            for line in shown:
                print(f"  | {line}")
    for attached in report.get("attached", []):
        _print_endpoint(attached)
    if report.get("attached_error"):
        print(f"attached: {report['attached_error']}")
    target = report.get("target")
    if target is not None:  # what chat, metrics and bench talk to without --endpoint
        chosen = target["endpoint"]
        print(
            "talk to: "
            + (
                f"{chosen['name']} ({chosen['url']})"
                if chosen
                else target["why_none"] or "no engine is ready"
            )
        )
    gpu = report["gpu"]
    print(
        "gpu:     "
        + (
            f"{gpu['name']} (driver {gpu['driver']})"
            if gpu["available"]
            else f"MISSING - {gpu['error']}"
        )
    )
    mem = report.get("memory", {})
    if "error" in mem:
        print(f"memory:  {mem['error']}")
    else:
        print(
            f"memory:  {gib(mem['available'])} available of {gib(mem['total'])}, "
            f"page cache {gib(mem['cached'])}"
        )


def print_failure_log(failure: dict[str, Any] | None) -> int:
    """`sparkdeck logs --last-failure`: the failed launch and every log line kept with it."""
    if not failure:
        print(
            "no failed launch on record (none since the last success, or dismissed)",
            file=sys.stderr,
        )
        return 1
    print(f"last launch failed: {failure_text(failure)}")
    log = failure_log(failure)
    print(
        "the engine's last log lines:"
        if log
        else "no engine log was kept (it failed "
        "before its container ran, or Docker could not give its log)"
    )
    for line in log:
        print(f"  | {line}")
    return 0


def _print_endpoint(e: dict[str, Any]) -> None:
    state = (
        "healthy"
        if e["healthy"]
        else (
            (e.get("error") or "unreachable")
            if not e["reachable"]
            else f"not ready (HTTP {e['health_code']})"
        )
    )
    models = ", ".join(e["models"]) or "-"
    print(f"{e['source']}: {e['name']} {e['url']} [{e['kind']}] {state}; models: {models}")


class StopPrinter(LaunchListener):
    """`sparkdeck stop`'s words while the grace period runs (sparkdeck.launch.stop_countdown):
    on a terminal one line rewritten each second, in a log a line every 5 s."""

    def __init__(self, out: TextIO | None = None) -> None:
        self.out = out or sys.stdout
        self.tty = self.out.isatty()
        self.every = 1.0 if self.tty else 5.0
        self._countdown: Countdown | None = None
        self._grace = DEFAULT_GRACE_S

    def __call__(self, event: LaunchEvent) -> None:
        event.deliver(self)

    def tick(self, text: str) -> None:
        if self.tty:  # rewritten in place; the end line follows on a line of its own
            print(f"\r  {text:<72}", end="", file=self.out, flush=True)
        else:
            print(f"  {text}", file=self.out, flush=True)

    def counting(self, grace: float) -> Countdown:
        self._grace = grace
        self._countdown = Countdown(grace, self.tick, self.every)
        return self._countdown.__enter__()

    def ended(self, name: str, seconds: float) -> None:
        if self._countdown is not None:
            self._countdown.stop()
            self._countdown = None
        if self.tty:
            print(file=self.out)
        print(f"  {end_text(name, self._grace, seconds)}", file=self.out, flush=True)

    def previous_stopping(self, event: PreviousStopping) -> None:
        if event.engine.alive:  # an exited container has nothing to wait for
            print(
                start_text(event.engine.preset_id or event.engine.name, event.grace),
                file=self.out,
                flush=True,
            )
            self.counting(event.grace)

    def previous_stopped(self, event: PreviousStopped) -> None:
        if self._countdown is not None:
            self.ended(event.engine.preset_id or event.engine.name, event.seconds)
