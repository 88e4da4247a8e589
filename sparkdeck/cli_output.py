"""How the CLI shows things to a person: launch progress, preset lists, status, prompts."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any, TextIO

from sparkdeck.pull_progress import PullProgress, PullTracker
from sparkdeck.host.meminfo import gib
from sparkdeck.launcher import (
    CacheFlushed, ContainerStarted, EngineReady, FitChecked, FlushSkipped, GuardDecided,
    GuardFailed, ModelPullStarted, PreviousStopped, PreviousStopping, PullStarted, SwitchWaited,
    TimelineSaved,
)
from sparkdeck.presets import PresetCatalog


class LaunchPrinter:
    """Prints launch events as they come; pull progress as one updating line on a terminal."""

    def __init__(self, out: TextIO):
        self.out = out
        self.tty = out.isatty()
        self.tracker = PullTracker()
        self._last_step = -1
        self._switch_at = -1
        self._guard_level = "ok"

    def __call__(self, event: object) -> None:
        if isinstance(event, PullProgress):
            self._pull(event)
            return
        line = self._describe(event)
        if line:
            print(line, file=self.out, flush=True)

    def _pull(self, event: PullProgress) -> None:
        self.tracker.update(event)
        fraction = self.tracker.fraction
        if fraction is None:
            return
        text = f"pulling {event.image}: {fraction:4.0%} ({self.tracker.layers_done} layers done)"
        if self.tty:
            print("\r" + text, end="", file=self.out, flush=True)
        elif int(fraction * 10) != self._last_step:  # a line per 10 % in logs and pipes
            self._last_step = int(fraction * 10)
            print(text, file=self.out, flush=True)

    def _describe(self, event: object) -> str | None:
        prefix = "\n" if self.tty and self._last_step >= -1 and self.tracker.fraction else ""
        if isinstance(event, PullStarted):
            self.tracker.reset()
            return f"image {event.image} is not here: pulling it"
        if isinstance(event, ModelPullStarted):
            self.tracker.reset()
            self._last_step = -1
            return f"{prefix}the engine is up; model {event.model} is not in it yet: pulling it"
        if isinstance(event, PreviousStopping):
            return f"{prefix}stopping {event.engine.preset_id} ({event.engine.name})"
        if isinstance(event, PreviousStopped):
            return f"stopped {event.engine.preset_id} in {event.seconds:.1f} s"
        if isinstance(event, FitChecked):
            head = "memory fit: " + event.fit.verdict + (" (launching anyway: --force)"
                                                         if event.forced else "")
            return "\n  ".join([head, *event.fit.lines()[:-1]])
        if isinstance(event, SwitchWaited):
            last, self._switch_at = self._switch_at, int(event.progress.elapsed // 5)
            if event.progress.done or last != self._switch_at:  # a line every 5 s
                return "waiting for memory to come back: " + event.progress.describe()
            return None
        if isinstance(event, GuardDecided):
            level, self._guard_level = self._guard_level, event.decision.level
            return "memory guard: " + event.decision.describe() if level != \
                event.decision.level else None
        if isinstance(event, GuardFailed):
            return f"memory guard cannot read the host, the start-up is NOT guarded: {event.error}"
        if isinstance(event, TimelineSaved):
            t = event.timeline
            phases = ", ".join(f"{m.phase} {m.t:.1f} s" for m in t.marks) or "none seen"
            return (f"start-up timeline: {len(t.points)} samples, peak used "
                    f"{gib(t.peak_used)}, phases: {phases} ({event.path})")
        if isinstance(event, CacheFlushed):
            return prefix + event.report.describe()
        if isinstance(event, FlushSkipped):
            return f"page cache not flushed ({event.reason})"
        if isinstance(event, ContainerStarted):
            return f"started {event.engine.name}; waiting for {event.engine.base_url}" \
                   f"{event.engine.health_path}"
        if isinstance(event, EngineReady):
            return (f"ready in {event.seconds:.1f} s: {event.engine.preset_id} at "
                    f"{event.engine.base_url} (OpenAI API at {event.engine.base_url}/v1)")
        return None


def confirm(question: str) -> bool:
    """Ask on a terminal; without one, the answer is no (scripts pass --yes)."""
    if not sys.stdin.isatty():
        return False
    try:
        answer = input(f"{question} [y/N] ")
    except EOFError:
        return False
    return answer.strip().lower() in ("y", "yes")


def print_presets(catalog: PresetCatalog, user_dir: Path,
                  claims: dict[str, str] | None = None) -> None:
    claims = claims or {}
    rows = [(p.id, p.kind, p.memory_setting(), p.image) for p in catalog.presets.values()]
    widths = [max([len(h)] + [len(r[i]) for r in rows]) for i, h in
              enumerate(("ID", "KIND", "MEMORY", "IMAGE"))]
    for row in [("ID", "KIND", "MEMORY", "IMAGE"), *rows]:
        print("  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip())
    if claims:
        print("\nmemory each preset will claim on this machine:")
        for preset_id, text in claims.items():
            print(f"  {preset_id}: {text}")
    print(f"\nuser presets: {user_dir} (a file there with the same id replaces a bundled one)")
    for problem in catalog.problems:
        print(f"invalid: {problem}", file=sys.stderr)


def print_status(report: dict[str, Any]) -> None:
    if "endpoint" in report:
        _print_endpoint(report["endpoint"])
        return
    docker = report["docker"]
    print("docker:  " + ("available" if docker["available"] else f"MISSING - {docker['error']}"))
    engine = report.get("engine")
    if engine:
        if engine["docker_state"] in ("exited", "dead"):
            print(f"engine:  {engine['preset_id']} CRASHED (exit code {engine['exit_code']}); "
                  "last log lines:")
            for line in engine["log_tail"][-10:]:
                print(f"  | {line}")
        else:
            print(f"engine:  {engine['preset_id']} {engine['docker_state']} at "
                  f"{engine['base_url']} ({engine['image']})")
    elif docker["available"]:
        print("engine:  none running")
    failure = report.get("last_failure")
    if failure and not (engine and engine["docker_state"] == "running"):
        print(f"last launch failed: {failure['preset_id']}: {failure['message']}")
    for attached in report.get("attached", []):
        _print_endpoint(attached)
    if report.get("attached_error"):
        print(f"attached: {report['attached_error']}")
    gpu = report["gpu"]
    print("gpu:     " + (f"{gpu['name']} (driver {gpu['driver']})" if gpu["available"]
                         else f"MISSING - {gpu['error']}"))
    mem = report.get("memory", {})
    if "error" in mem:
        print(f"memory:  {mem['error']}")
    else:
        print(f"memory:  {gib(mem['available'])} available of {gib(mem['total'])}, "
              f"page cache {gib(mem['cached'])}")


def _print_endpoint(e: dict[str, Any]) -> None:
    state = "healthy" if e["healthy"] else ("unreachable" if not e["reachable"]
                                            else f"not ready (HTTP {e['health_code']})")
    models = ", ".join(e["models"]) or "-"
    print(f"{e['source']}: {e['name']} {e['url']} [{e['kind']}] {state}; models: {models}")
