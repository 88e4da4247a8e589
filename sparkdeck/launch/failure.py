"""How a launch fails (DoesNotFit, GuardStoppedEngine, LaunchInterrupted and what it leaves),
and the last failed launch, kept in the data dir until the user dismisses it.

A launch that fails after it stopped the running engine leaves nothing running; a toast that
fades in seconds is not enough for that. The failure is written here (atomically) and shown
by `sparkdeck status` and the TUI's engine card until `sparkdeck dismiss`, the card's dismiss
key, or a launch that succeeds. This module is light (no docker SDK): the TUI reads it early.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sparkdeck.config import paths
from sparkdeck.runtime.errors import DockerRuntimeError
from sparkdeck.text_safety import clean, excerpt

if TYPE_CHECKING:
    from sparkdeck.guard.fit import FitCheck
    from sparkdeck.guard.policy import Decision
    from sparkdeck.runtime.client import DockerRuntime
    from sparkdeck.runtime.state import EngineState

# The engine's own last lines say why it failed ("error: invalid argument: ..."): the card
# has room for a few, `status` for more, `logs --last-failure` for all that were kept.
CARD_LOG_LINES = 4
STATUS_LOG_LINES = 10


class DoesNotFit(Exception):
    """The preset's claim does not fit in memory; `fit` carries the numbers."""

    def __init__(self, preset_id: str, fit: FitCheck):
        super().__init__(
            f"{preset_id} {fit.verdict}; not launched (the running engine, if "
            "any, keeps running). Pass --force to launch anyway.\n  " + "\n  ".join(fit.lines())
        )
        self.fit = fit


class GuardStoppedEngine(Exception):
    """The watchdog stopped the engine during its start-up, before the host ran out."""

    def __init__(self, preset_id: str, decision: Decision, record: Path | None):
        where = f"; readings saved in {record}" if record else ""
        super().__init__(
            f"the memory guard stopped {preset_id} while it started: "
            f"{'; '.join(decision.reasons)}{where}"
        )
        self.decision = decision
        self.record = record


def after_interrupt(
    runtime: DockerRuntime, preset_id: str, started: EngineState | None, touched: bool
) -> str:
    """What an interrupted launch leaves, as Docker says it is now (not as planned):
    `started` is the container the launch started, if it got that far; `touched`, whether it
    had begun to stop or start containers."""
    parts = [f"launch of {preset_id} interrupted"]
    try:
        engines = runtime.engines()
    except DockerRuntimeError as exc:
        return f"{parts[0]}; Docker cannot say what is left ({exc}): run `sparkdeck status`"
    if started is None:
        parts.append(
            "before its container was started" if touched else "before anything was changed"
        )
    else:
        mine = next((e for e in engines if e.container_id == started.container_id), None)
        if mine is None:
            parts.append(f"its container {started.name} was stopped and removed")
        elif mine.alive:
            parts.append(
                f"its container {started.name} is STILL RUNNING with no memory "
                "guard: stop it with `sparkdeck stop`"
            )
        else:
            parts.append(
                f"its container {started.name} stopped but was not removed "
                "(`sparkdeck stop` removes it)"
            )
    others = [
        e.preset_id or e.name
        for e in engines
        if e.alive and (started is None or e.container_id != started.container_id)
    ]
    parts.append(
        f"still running: {', '.join(others)}" if others else "no sparkdeck engine is running now"
    )
    return "; ".join(parts)


class LaunchInterrupted(Exception):
    """Ctrl-C ended a launch; the message says what is left running, as Docker reports it."""


def _failure_path() -> Path:
    return paths.data_dir() / "last-launch-failure.json"


def record_failure(
    preset_id: str, message: str, exit_code: int | None, log_tail: list[str]
) -> None:
    paths.atomic_write_text(
        _failure_path(),
        json.dumps(
            {
                "preset_id": preset_id,
                "message": message,
                "exit_code": exit_code,
                "log_tail": log_tail,
                "at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
            },
            indent=2,
        ),
    )


def last_failure() -> dict[str, Any] | None:
    try:
        data = json.loads(_failure_path().read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def clear_failure() -> None:
    try:
        _failure_path().unlink()
    except FileNotFoundError:
        pass


def failure_text(failure: dict[str, Any] | None) -> str | None:
    """One line for the screen: "<preset>: <message> (<when>)"; None when there is none.
    The message can quote the engine or a server: cleaned, never obeyed."""
    if not failure:
        return None
    when = f" ({failure['at']})" if failure.get("at") else ""
    return excerpt(
        f"{failure.get('preset_id', '?')}: {failure.get('message', '')}{when}", limit=2000
    )


def failure_log(failure: dict[str, Any] | None, last: int | None = None) -> list[str]:
    """The engine's last log lines kept with the failure (the `last` of them), each cleaned:
    a container's output is shown, never obeyed."""
    if not failure:
        return []
    tail = failure.get("log_tail")
    lines = [clean(str(line)).replace("\n", " ") for line in tail] if isinstance(tail, list) else []
    return lines[-last:] if last else lines


class LaunchFailed(Exception):
    """A launch's error with the engine's own last log line added (a notification's text)."""


def with_engine_reason(exc: Exception) -> Exception:
    """`exc`, or its message with the engine's last log line when the failure just recorded
    is this one: "stopped while starting (exit code 1)" alone does not say why, the engine's
    "error: invalid argument: ..." does. Reads a file: call it off the UI thread."""
    failure = last_failure()
    log = failure_log(failure, 1)
    if not log or not failure or str(failure.get("message", "")) not in str(exc):
        return exc  # no log kept, or an older failure (a refused launch records none)
    return LaunchFailed(f"{exc}; the engine's last log line: {log[0]}")
