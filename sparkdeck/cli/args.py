"""Argument groups that several commands share, so `status`, `metrics`, `chat` and `bench`
take the same options and no command module imports another (or the CLI's main)."""

from __future__ import annotations

import argparse

from sparkdeck.engines import KINDS


def endpoint_args(parser: argparse.ArgumentParser) -> None:
    """--endpoint URL and --kind: talk to one server directly instead of resolving one."""
    parser.add_argument(
        "--endpoint", metavar="URL", help="talk to this server directly instead of the registry"
    )
    parser.add_argument(
        "--kind", choices=sorted(KINDS), help="engine kind of --endpoint (detected if omitted)"
    )
