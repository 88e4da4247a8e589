"""`sparkdeck chat "PROMPT"`: one streamed reply from the running engine, for people and scripts.

Without --json the reply streams to stdout as it arrives, reasoning and the figures line go
to stderr (so `sparkdeck chat "..." > answer.txt` keeps only the answer). With --json one
object is printed at the end: reply, reasoning, TTFT, client and server tok/s, token counts.
Ctrl-C closes the stream, so the engine stops generating. Replies are saved as conversations
with --save (or --continue ID, which appends to a saved one).
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from sparkdeck.chat.client import ChatClient, Timed, api_key_from_env
from sparkdeck.chat.deltas import Content, Reasoning
from sparkdeck.chat.session import ChatSession, ChatSettings
from sparkdeck.chat.store import ConversationError, find, load
from sparkdeck.cli.commands import CommandFailed, endpoint_args
from sparkdeck.endpoints import Endpoint, resolve_endpoint
from sparkdeck.engines import get_kind
from sparkdeck.text_safety import clean


def register(subparsers: Any) -> None:

    chat = subparsers.add_parser("chat", help="ask the running engine one question (streamed)")
    chat.add_argument("prompt", help="the question")
    chat.add_argument("--system", metavar="S", default="", help="system prompt")
    chat.add_argument("--max-tokens", type=int, metavar="N", help="longest reply in tokens")
    chat.add_argument("--temperature", type=float, metavar="T", help="sampling temperature")
    thinking = chat.add_mutually_exclusive_group()
    thinking.add_argument(
        "--thinking",
        dest="thinking",
        action="store_true",
        default=None,
        help="ask the model to think first (mapped per engine kind)",
    )
    thinking.add_argument(
        "--no-thinking", dest="thinking", action="store_false", help="ask the model not to think"
    )
    chat.add_argument("--model", help="model id (default: the first the server lists)")
    chat.add_argument("--save", action="store_true", help="save as a new conversation")
    chat.add_argument(
        "--continue",
        dest="continue_id",
        metavar="ID",
        help="continue a saved conversation (see `sparkdeck conversations`)",
    )
    chat.add_argument("--json", action="store_true", help="print one JSON object at the end")
    endpoint_args(chat)
    chat.set_defaults(run=run_chat)


def chat_endpoint(url: str | None, kind: str | None) -> Endpoint:
    """--endpoint when given, else the engine sparkdeck runs, else the one attached engine."""
    return resolve_endpoint(url, kind, "chat with")


class _Printer:
    """Streams content to stdout and reasoning to stderr as they arrive."""

    def __init__(self) -> None:
        self.in_reasoning = False
        self.dim = sys.stderr.isatty()

    def __call__(self, timed: Timed) -> None:
        delta = timed.delta
        if isinstance(delta, Reasoning):
            if not self.in_reasoning:
                self.in_reasoning = True
                sys.stderr.write("\033[2m" if self.dim else "[reasoning] ")
            sys.stderr.write(delta.text)
            sys.stderr.flush()
        elif isinstance(delta, Content):
            self._end_reasoning()
            sys.stdout.write(delta.text)
            sys.stdout.flush()

    def _end_reasoning(self) -> None:
        if self.in_reasoning:
            self.in_reasoning = False
            sys.stderr.write("\033[0m\n" if self.dim else "\n")


def run_chat(args: argparse.Namespace) -> int:
    endpoint = chat_endpoint(args.endpoint, args.kind)
    kind = get_kind(endpoint.kind)
    settings = ChatSettings(args.system, args.temperature, args.max_tokens, args.thinking)
    client = ChatClient(endpoint.url, api_key=api_key_from_env(kind.api_key_env))
    try:
        if args.continue_id:
            conversation = load(find(args.continue_id))
            session = ChatSession.reopen(client, kind, conversation, settings)
        else:
            session = ChatSession(client, kind, settings, save=args.save)
        session.model = args.model or session.model
    except ConversationError as exc:
        client.close()
        raise CommandFailed(str(exc)) from None
    printer = None if args.json else _Printer()
    try:
        try:
            outcome = session.ask(args.prompt, on_delta=printer)
        except KeyboardInterrupt:
            # the stream's context closed the connection on the way out: the engine stops
            raise CommandFailed("cancelled; the engine was told to stop") from None
        except ConversationError as exc:  # --save on a full disk: one line, what was kept
            kept = (
                f"conversation {session.conversation_id} keeps what was written before"
                if session.conversation_id
                else "nothing was saved"
            )
            raise CommandFailed(f"{exc}; {kept}") from None
    finally:
        try:
            session.close()
        except ConversationError:  # the same failure again on the way out: said above
            pass
        client.close()
    if args.json:
        print(
            json.dumps(
                {
                    **outcome.to_dict(),
                    "endpoint": endpoint.url,
                    "kind": kind.name,
                    "conversation": session.conversation_id,
                },
                indent=2,
            )
        )
    else:
        if printer is not None:
            printer._end_reasoning()
        if outcome.text:
            print()
        caption = outcome.figures.summary()
        saved = f" · saved as {session.conversation_id}" if session.conversation_id else ""
        print(clean(f"[{outcome.model} · {caption}{saved}]"), file=sys.stderr)
    if outcome.error:
        raise CommandFailed(outcome.error)
    return 0
