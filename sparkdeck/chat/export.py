"""Saved conversations as a person reads them: the Markdown export and the figures caption.

Both show what a server sent (reply text, reasoning, error messages) and what a file holds
(a conversation may have been edited by hand or written by another version), so both are
defensive: the export is cleaned of control characters (a reader `cat`s it, and nothing in
it may drive their terminal), and figures of the wrong type count as not recorded.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from sparkdeck.chat.reply import ReplyFigures
from sparkdeck.chat.store import Conversation
from sparkdeck.text_safety import clean


def figures_caption(saved: Mapping[str, Any]) -> str:
    """The caption of saved figures; a file from another version (or edited by hand) may
    lack some fields or hold values of the wrong type: those count as not recorded."""
    if not isinstance(saved, Mapping):
        return ""
    known: dict[str, Any] = {}
    for name, spec in ReplyFigures.__dataclass_fields__.items():
        value = saved.get(name)
        if "str" in str(spec.type):
            known[name] = value if isinstance(value, str) else None
        elif "int" in str(spec.type):
            known[name] = value if isinstance(value, int) and not isinstance(value, bool) else None
        else:
            known[name] = (
                float(value)
                if isinstance(value, (int, float))
                and not isinstance(value, bool)
                and math.isfinite(value)
                else None
            )
    known["tokens_from"] = known["tokens_from"] or "chunks"
    return ReplyFigures(**known).summary()


def export_markdown(conversation: Conversation) -> str:
    """The conversation as Markdown: reasoning in a collapsible block, figures under replies."""
    meta = conversation.meta
    lines = [
        f"# {conversation.title}",
        "",
        f"- saved: {meta.get('created', '?')}",
        f"- engine: {meta.get('kind', '?')} at {meta.get('endpoint', '?')}",
        f"- model: {meta.get('model', '?')}",
    ]
    if meta.get("system"):
        lines += ["", "**System**", "", str(meta["system"])]
    for turn in conversation.turns:
        lines += ["", "**You**" if turn.role == "user" else "**Assistant**", ""]
        if turn.reasoning:
            lines += [
                "<details><summary>Reasoning</summary>",
                "",
                turn.reasoning,
                "",
                "</details>",
                "",
            ]
        if turn.content:
            lines.append(turn.content)
        lines += [f"```json\n{raw}\n```" for raw in turn.tool_calls]
        notes = []
        if turn.figures:
            notes.append(figures_caption(turn.figures))
        if turn.cancelled:
            notes.append("cancelled")
        if turn.error:
            notes.append(f"error: {turn.error}")
        if not turn.complete:
            notes.append("cut off (the reply did not finish saving)")
        if notes:
            lines += ["", "_" + " · ".join(n for n in notes if n) + "_"]
    # a saved reply (or its error) may hold what a server sent: ESC, BEL, NUL... A reader
    # `cat`s the export; nothing in it may drive their terminal
    return clean("\n".join(lines) + "\n")
