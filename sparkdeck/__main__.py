"""The `sparkdeck` console script (`main`) and `python -m sparkdeck`: the terminal UI without
arguments, the CLI with them.

Kept apart from sparkdeck.cli so that opening the UI does not first import what only the
commands need (the docker SDK and requests alone take ~0.1 s): the first frame is on screen
before any of that loads (benchmarks/tui_idle.py measures it).
"""

from __future__ import annotations

import sys
from collections.abc import Sequence


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if not args:
        from sparkdeck.ui import gc_tuning

        gc_tuning.pause_for_startup()  # until the first frame: the app resumes it
        from sparkdeck.ui.run import run_app

        return run_app()
    from sparkdeck.cli import main as cli_main

    return cli_main(args)


if __name__ == "__main__":
    raise SystemExit(main())
