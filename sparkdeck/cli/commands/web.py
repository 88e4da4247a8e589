"""`sparkdeck web`: the dashboard in a browser (sparkdeck.ui.web, through textual-serve)."""

from __future__ import annotations

import argparse

DEFAULT_PORT = 8000  # sparkdeck.ui.web.DEFAULT_PORT, without importing aiohttp for --help


def register(sub: argparse._SubParsersAction) -> None:
    web = sub.add_parser(
        "web",
        help="serve the dashboard to a browser (127.0.0.1 unless "
        "--host; every address needs the token URL it prints)",
    )
    web.add_argument(
        "--host",
        default="127.0.0.1",
        help="address to listen on (default 127.0.0.1; reach it with ssh -L)",
    )
    web.add_argument(
        "--port", type=int, default=DEFAULT_PORT, help=f"port (default {DEFAULT_PORT})"
    )
    web.add_argument(
        "--public-url",
        metavar="URL",
        help="the address browsers use, e.g. http://spark.lan:8000 (default: "
        "the host given, or this machine's name for 0.0.0.0)",
    )
    web.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from sparkdeck.ui.web import serve  # aiohttp and textual-serve: only for this command

    return serve(args.host, args.port, args.public_url)
