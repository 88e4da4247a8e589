"""`sparkdeck endpoint`: how to point a client at the service's OpenAI endpoint.

Prints the base URL, whether the service and its endpoint answer, the model names the
endpoint lists, whether a key is needed (naming the environment variable, never the key),
and snippets to paste: curl, the `openai` Python client, Open WebUI's connection fields, and
an `ssh -L` line for a laptop. The text is sparkdeck.endpoint.connect_info's, which the TUI's
connect screen shows too.
"""

from __future__ import annotations

import argparse
import json

from sparkdeck.cli.commands import CommandFailed


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "endpoint", help="the stable OpenAI endpoint: URL, models, ready-to-paste snippets"
    )
    parser.add_argument("--json", action="store_true")
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from sparkdeck.config.settings import SettingsError, load_settings
    from sparkdeck.endpoint.connect_info import as_text, read_connect_info
    from sparkdeck.service.client import service_state

    try:
        settings = load_settings().endpoint
    except SettingsError as exc:
        raise CommandFailed(str(exc)) from exc
    info = read_connect_info(settings, service_state=service_state)
    print(json.dumps(info.to_json()) if args.json else as_text(info))
    return 0
