"""Sub-commands that live in modules of their own (metrics, chat, bench, telemetry, ...).

Each module here has `register(subparsers)`, which adds its parser and sets
`set_defaults(run=function)`; the function takes the parsed arguments and returns the exit
code. A command that cannot do its job raises `CommandFailed` (or another error listed in
`sparkdeck.cli.run.EXPECTED_ERRORS`): the CLI prints it as one line and exits with 1.
Options that several commands share are added by the functions here, so `status`,
`metrics`, `chat` and `bench` take the same ones and no command module imports another (or
the CLI's main).
"""

from __future__ import annotations

import argparse

from sparkdeck.engines import KINDS

# Modules listed here are imported when the parser is built, in this order.
MODULES: tuple[str, ...] = (
    "sparkdeck.cli.commands.chat",
    "sparkdeck.cli.commands.conversations",
    "sparkdeck.cli.commands.metrics",
    "sparkdeck.cli.commands.guard",
    "sparkdeck.cli.commands.telemetry",
    "sparkdeck.cli.commands.bench",
    "sparkdeck.cli.commands.models",
    "sparkdeck.cli.commands.service",
    "sparkdeck.cli.commands.endpoint",
    "sparkdeck.cli.commands.history",
    "sparkdeck.cli.commands.web",
)


class CommandFailed(Exception):
    """A command could not do its job; the message is printed and the exit code is 1."""


def endpoint_args(parser: argparse.ArgumentParser) -> None:
    """--endpoint URL and --kind: talk to one server directly instead of resolving one."""
    parser.add_argument(
        "--endpoint", metavar="URL", help="talk to this server directly instead of the registry"
    )
    parser.add_argument(
        "--kind", choices=sorted(KINDS), help="engine kind of --endpoint (detected if omitted)"
    )
