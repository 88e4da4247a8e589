"""Sub-commands that live in modules of their own (metrics, chat, bench, telemetry, ...).

Each module here has `register(subparsers)`, which adds its parser and sets
`set_defaults(run=function)`; the function takes the parsed arguments and returns the exit
code. A command that cannot do its job raises `CommandFailed` (or another error listed in
`sparkdeck.cli.EXPECTED_ERRORS`): the CLI prints it as one line and exits with 1.
"""

from __future__ import annotations

# Modules listed here are imported when the parser is built, in this order.
MODULES: tuple[str, ...] = ("sparkdeck.commands.chat", "sparkdeck.commands.conversations",
                            "sparkdeck.commands.metrics", "sparkdeck.commands.guard",
                            "sparkdeck.commands.telemetry", "sparkdeck.commands.bench")


class CommandFailed(Exception):
    """A command could not do its job; the message is printed and the exit code is 1."""
