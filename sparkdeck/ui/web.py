"""Web mode: the same dashboard in a browser, served by textual-serve.

textual-serve (Textualize's own server, aiohttp underneath) starts one `sparkdeck` process
per browser connection and relays its screen and keys over a websocket; its page and its
JavaScript terminal come from its own package (static/ and templates/ in the wheel), so
nothing is fetched from the internet (the page names a web font it does without offline).

It listens on 127.0.0.1 unless told otherwise: from a laptop, an ssh tunnel reaches it
(`ssh -L 8000:127.0.0.1:8000 spark`, then the printed URL). On every address, loopback
included, the site needs the token printed once at start (web_doors.py: a cookie after the
first visit, Host and Origin checked on every request), since any local user and any page
open in the browser can reach loopback.
"""

from __future__ import annotations

import logging
import secrets
import shlex
import socket
import sys
from typing import Any, TextIO

import aiohttp_jinja2
from aiohttp import web
from textual_serve.server import Server

from sparkdeck.ui.web_doors import TOKEN_PARAM, WILDCARDS, Doors, guard, local_names, loopback_only

DEFAULT_PORT = 8000


def app_command() -> str:
    """The command textual-serve runs per connection (it takes a shell string: quoted here
    from an argv list, so a path with spaces stays one word)."""
    return shlex.join([sys.executable, "-m", "sparkdeck"])


def public_url(host: str, port: int) -> str:
    """The address to print: the host given, or this machine's name when listening on every
    interface."""
    shown = socket.getfqdn() if host in WILDCARDS else host
    if ":" in shown:  # an IPv6 literal
        shown = f"[{shown}]"
    return f"http://{shown}:{port}"


class Redacting(logging.Filter):
    """Replaces the token wherever it would appear in a log line (a URL, an exception)."""

    def __init__(self, token: str) -> None:
        super().__init__()
        self._token = token

    def filter(self, record: logging.LogRecord) -> bool:
        text = record.getMessage()
        if record.exc_info:  # the traceback is part of the line: format it here, redacted
            text += "\n" + logging.Formatter().formatException(record.exc_info)
            record.exc_info, record.exc_text = None, None
        record.msg, record.args = text.replace(self._token, "<token>"), None
        return True


class DashboardServer(Server):
    """textual-serve's server behind web_doors' checks. `url` set: the page's own URLs use
    it (a proxy in front); else they follow the Host the browser used, so a cookie set on
    `localhost` goes with the websocket to `localhost` too."""

    def __init__(
        self, host: str, port: int, token: str, url: str | None = None, command: str | None = None
    ) -> None:
        super().__init__(
            command or app_command(),
            host=host,
            port=port,
            title="sparkdeck",
            public_url=url or public_url(host, port),
        )
        self.token = token
        self._fixed_url = url is not None
        extra = local_names() if host in WILDCARDS else ()
        self.doors = Doors.for_server(token, host, port, self.public_url, extra)

    def initialize_logging(self) -> None:
        # plain lines to stderr: no access log (its URLs), no tracebacks with local
        # variables (rich's), and the token redacted from anything that still carries it
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("%(levelname)s %(name)s: %(message)s"))
        handler.addFilter(Redacting(self.token))
        logging.basicConfig(level=logging.INFO, handlers=[handler], force=True)
        logging.getLogger("aiohttp.access").setLevel(logging.WARNING)

    @property
    def address(self) -> str:
        """The URL to open, with the token."""
        return f"{self.public_url}/?{TOKEN_PARAM}={self.token}"

    async def _make_app(self) -> web.Application:
        site = await super()._make_app()
        site.middlewares.append(guard(self.doors))
        return site

    async def handle_index(self, request: web.Request) -> Any:
        """textual-serve's page, its URLs built from the address the browser used."""
        base = self.public_url if self._fixed_url else f"{request.scheme}://{request.host}"
        static = base + str(request.app.router["static"].url_for(filename="/")).rstrip("/")
        socket_url = base + str(request.app.router["websocket"].url_for())
        scheme = "wss:" if base.startswith("https") else "ws:"
        context = {
            "font_size": _int(request.query.get("fontsize"), 16),
            "app_websocket_url": scheme + socket_url.split(":", 1)[1],
            "config": {"static": {"url": static + "/"}},
            "application": {"name": self.title},
        }
        return aiohttp_jinja2.render_template("app_index.html", request, context)


def _int(value: str | None, default: int) -> int:
    try:
        return int(value) if value is not None else default
    except ValueError:
        return default


def serve(
    host: str = "127.0.0.1",
    port: int = DEFAULT_PORT,
    url: str | None = None,
    out: TextIO | None = None,
) -> int:
    """Serve the dashboard until interrupted; the token URL is printed once, here only."""
    out = out or sys.stdout
    server = DashboardServer(host, port, secrets.token_urlsafe(24), url)
    if loopback_only(host):
        print(
            f"sparkdeck web: open {server.address}\n  (the token is shown only now; any "
            f"local user can reach {host}:{port}, and the token keeps them out. From a "
            f"laptop: ssh -L {port}:127.0.0.1:{port} THIS-HOST, then the same URL)",
            file=out,
            flush=True,
        )
    else:
        print(
            f"sparkdeck web on {host}:{port}, reachable beyond this machine: open "
            f"{server.address}\n  (the token is shown only now)",
            file=out,
            flush=True,
        )
    server.serve()
    return 0
