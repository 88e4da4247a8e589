"""The last failed launch, kept in the data dir until the user dismisses it.

A launch that fails after it stopped the running engine leaves nothing running; a toast that
fades in seconds is not enough for that. The failure is written here (atomically) and shown
by `sparkdeck status` and the TUI's engine card until `sparkdeck dismiss`, the card's dismiss
key, or a launch that succeeds. This module is light (no docker SDK): the TUI reads it early.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from sparkdeck import paths


def _failure_path() -> Path:
    return paths.data_dir() / "last-launch-failure.json"


def record_failure(preset_id: str, message: str, exit_code: int | None,
                   log_tail: list[str]) -> None:
    paths.atomic_write_text(_failure_path(), json.dumps({
        "preset_id": preset_id, "message": message, "exit_code": exit_code,
        "log_tail": log_tail, "at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    }, indent=2))


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
    """One line for the screen: "<preset>: <message> (<when>)"; None when there is none."""
    if not failure:
        return None
    when = f" ({failure['at']})" if failure.get("at") else ""
    return f"{failure.get('preset_id', '?')}: {failure.get('message', '')}{when}"
