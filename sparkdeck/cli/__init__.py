"""The scriptable command line: `sparkdeck COMMAND ...` (run: the parser, the built-in
commands and the error policy; output: its printers; args: option groups commands share;
commands/: one module per larger command).

`main` loads the CLI only when called, so importing a piece of this package (say, the
printers) does not load the docker SDK with it.
"""

from __future__ import annotations

from collections.abc import Sequence


def main(argv: Sequence[str] | None = None) -> int:
    """Run one command line; returns the exit code (see sparkdeck.cli.run)."""
    from sparkdeck.cli.run import main as run_main

    return run_main(argv)
