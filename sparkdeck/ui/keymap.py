"""The dashboard's key bindings, each with an id, and the user's keymap applied to them.

Every binding in the UI carries an id in one style: kebab-case, prefixed with the pane or
dialog it works in when it is not the dashboard's (`launch`, `tab-chat`, `chat-cancel`,
`fit-cancel`). settings.toml's `[keys]` maps ids to keys (checked by sparkdeck.config.settings,
which names a bad id or key with its file); Textual's keymap then replaces the key of every
binding with that id, in the dashboard, its panes and its dialogs alike.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from textual.app import App
from textual.binding import Binding

# The four side tabs' keys share one footer item ("m e c g tabs", in the tab bar's order): as
# four items they took 44 of 80 columns and the footer cut Bench, Models and Quit there.
TABS = Binding.Group("tabs")

# The footer shows them in this order and cuts what does not fit: Help comes first so that at
# 80 columns the one key that lists every other is always on screen.
BINDINGS = [
    Binding("question_mark,f1", "open('help')", "Help", key_display="?", id="help"),
    Binding(
        "l",
        "launch",
        "Launch",
        tooltip="Launch the selected preset, stopping "
        "(switching from) the running engine after a confirmation",
        id="launch",
    ),
    Binding("s", "stop", "Stop", tooltip="Stop the engine sparkdeck started", id="stop"),
    # Theme and Refresh are in the help and the palette: with them the footer cut "q Quit" at
    # 120 columns.
    Binding(
        "t",
        "next_theme",
        "Theme",
        tooltip="Switch to the next theme (kept in settings.toml)",
        id="theme",
        show=False,
    ),
    Binding(
        "r", "refresh", "Refresh", tooltip="Read presets and Docker again", id="refresh", show=False
    ),
    Binding(
        "m",
        "show_tab('machine-tab')",
        "Machine",
        tooltip="Memory, PSI, GPU and environment tab",
        id="tab-machine",
        group=TABS,
    ),
    Binding(
        "e",
        "show_tab('metrics-tab')",
        "Metrics",
        tooltip="The engine's own numbers tab: tok/s, queue, KV cache, TTFT",
        id="tab-metrics",
        group=TABS,
    ),
    Binding(
        "c",
        "show_tab('chat-tab')",
        "Chat",
        tooltip="Chat with the ready engine (Enter sends)",
        id="tab-chat",
        group=TABS,
    ),
    Binding(
        "g",
        "show_tab('guard-tab')",
        "Guard",
        tooltip="Memory guard tab: the last start-up's memory timeline",
        id="tab-guard",
        group=TABS,
    ),
    Binding(
        "b",
        "open('bench')",
        "Bench",
        tooltip="Benchmark comparison of the presets on one "
        "model; b there benchmarks the running engine",
        id="bench",
    ),
    Binding(
        "o",
        "open('models')",
        "Models",
        tooltip="Models on this machine; pull one from the Hub with progress (Esc cancels)",
        id="models",
    ),
    Binding(
        "h",
        "open('history')",
        "History",
        tooltip="The flight recording: memory, PSI, GPU "
        "power and tok/s over 10m to 7d (keys 1-5 there)",
        id="history",
        show=False,
    ),  # in the help and the palette; the footer is full at 80 columns
    Binding(
        "a",
        "open('connect')",
        "Connect",
        tooltip="The OpenAI endpoint: URL, models and "
        "snippets to paste; the requests it forwarded (keys 1-2 there)",
        id="connect",
        show=False,
    ),  # in the help and the palette
    Binding("q", "quit", "Quit", id="quit"),
    Binding(
        "x",
        "dismiss_failure",
        "Dismiss",
        tooltip="Dismiss the failed launch the engine card shows",
        id="dismiss-failure",
    ),
]


def apply_keymap(app: App[Any], keys: Mapping[str, str]) -> list[tuple[str, str]]:
    """Give `app` the user's keymap; return (title, text) for each dashboard key that now
    does two things (the first binding wins there, so the user should hear of it)."""
    app.set_keymap(dict(keys))
    if not keys:
        return []
    owner: dict[str, str] = {}
    problems = []
    for binding in BINDINGS:
        for key in keys.get(binding.id or "", binding.key).split(","):
            key = key.strip()
            if key in owner:
                problems.append(
                    (
                        "settings.toml [keys]",
                        f"{key!r} is bound to both {owner[key]} and {binding.id}",
                    )
                )
            owner[key] = binding.id or binding.action
    return problems
