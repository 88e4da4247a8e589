"""The [keys] table of settings.toml: which of the TUI's bindings may be remapped, and how a
key is spelled. Plain data and checks: settings never imports the UI (test_ui_keymap.py
checks that KEY_IDS is every id the UI's bindings carry).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from sparkdeck.config.schema import FileProblem

# Binding ids of the TUI that [keys] may remap (tests/unit/test_ui_keymap.py checks that this is
# every id the UI's bindings carry). Kept here as plain data: settings never imports the UI.
KEY_IDS = frozenset(
    {
        "launch",
        "stop",
        "theme",
        "refresh",
        "help",
        "quit",
        "dismiss-failure",
        "tab-machine",
        "tab-metrics",
        "tab-chat",
        "tab-guard",
        "bench",
        "chat-cancel",
        "chat-fold",
        "chat-thinking",
        "chat-open",
        "chat-new",
        "chat-next-field",
        "conversations-close",
        "conversations-export",
        "fit-cancel",
        "switch-skip",
        "confirm-yes",
        "confirm-no",
        "help-close",
        "bench-metric",
        "bench-next-model",
        "bench-prev-model",
        "bench-reload",
        "bench-run",
        "bench-stop",
        "bench-close",
        "history",
        "history-back",
        "history-ten-minutes",
        "history-hour",
        "history-six-hours",
        "history-day",
        "history-week",
        "history-reload",
        "postmortem-history",
        "postmortem-dismiss",
        "postmortem-quit",
        "models",
        "connect",
        "connect-back",
        "connect-copy",
        "connect-reload",
        "connect-tab",
        "connect-requests",
    }
)
# A Textual key name, optionally with modifiers: l, L, f1, ctrl+r, question_mark, ?.
_KEY = re.compile(r"((ctrl|shift|alt|super|meta|hyper)\+)*([a-z0-9_]+|[A-Z]|[!-~])")


def check_keys(raw: Mapping[str, Any], path: Path) -> tuple[dict[str, str], list[FileProblem]]:
    """[keys]: each binding id to a key, or a list of keys (or one comma-separated string)."""
    keys: dict[str, str] = {}
    problems: list[FileProblem] = []
    for binding_id, value in raw.items():
        where = f"keys.{binding_id}"
        if binding_id not in KEY_IDS:
            problems.append(
                FileProblem(
                    path,
                    where,
                    "no key binding has this id (known: " + ", ".join(sorted(KEY_IDS)) + ")",
                )
            )
            continue
        names = value.split(",") if isinstance(value, str) else value
        if not isinstance(names, list) or not names or not all(isinstance(n, str) for n in names):
            problems.append(FileProblem(path, where, "must be a key or a list of keys"))
            continue
        bad = [n for n in names if not _KEY.fullmatch(n.strip())]
        if bad:
            problems.append(
                FileProblem(
                    path,
                    where,
                    f"not a key: {bad[0]!r} (keys look like l, L, f2, ctrl+r, question_mark)",
                )
            )
            continue
        keys[binding_id] = ",".join(n.strip() for n in names)
    return keys, problems
