"""`sparkdeck conversations`: list saved chat conversations, or export one to Markdown."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from sparkdeck.chat.export import export_markdown
from sparkdeck.chat.store import (
    ConversationError,
    conversations_dir,
    find,
    list_conversations,
    load,
)
from sparkdeck.cli.commands import CommandFailed
from sparkdeck.config.paths import atomic_write_text


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "conversations", help="list saved chat conversations, or export one to Markdown"
    )
    parser.add_argument("--json", action="store_true", help="machine-readable list")
    sub = parser.add_subparsers(dest="conversations_command", metavar="export")
    export = sub.add_parser("export", help="write a conversation as Markdown")
    export.add_argument("id", help="conversation id (a unique prefix is enough)")
    export.add_argument(
        "-o", "--output", type=Path, metavar="FILE", help="write here instead of printing"
    )
    parser.set_defaults(run=run_conversations)


def run_conversations(args: argparse.Namespace) -> int:
    try:
        if args.conversations_command == "export":
            text = export_markdown(load(find(args.id)))
            if args.output:
                atomic_write_text(args.output, text)  # private, like the conversation
                print(f"wrote {args.output}")
            else:
                print(text, end="")
            return 0
        found = list_conversations()
    except ConversationError as exc:
        raise CommandFailed(str(exc)) from None
    if args.json:
        print(
            json.dumps(
                [
                    {
                        "id": c.id,
                        "title": c.title,
                        "created": c.created,
                        "model": c.model,
                        "turns": c.turns,
                        "path": str(c.path),
                    }
                    for c in found
                ],
                indent=2,
            )
        )
        return 0
    if not found:
        print(f"no saved conversations in {conversations_dir()}")
    for c in found:
        print(
            f"{c.id}  {c.created[:16].replace('T', ' ')}  {c.turns:>3} turns  "
            f"{c.model[-24:]:<24}  {c.title}"
        )
    return 0
