"""Web mode: the same dashboard in a browser, served by textual-serve.

textual-serve (Textualize's own server, aiohttp underneath) starts one `sparkdeck` process
per browser connection and relays its screen and keys over a websocket; its page and its
JavaScript terminal come from its own package (static/ and templates/ in the wheel), so
nothing is fetched from the internet (the page names a web font it does without offline).

It listens on 127.0.0.1 unless told otherwise: from a laptop, an ssh tunnel reaches it
(`ssh -L 8000:127.0.0.1:8000 spark`, then http://127.0.0.1:8000/). On any other address
anyone on the network could drive the dashboard, so the whole site then lives under a random
token (`http://HOST:PORT/<token>/`, printed once at start): every other path answers 403,
the page, its files and its websocket included.
"""

from __future__ import annotations

import ipaddress
import logging
import secrets
import shlex
import socket
import sys

from aiohttp import web
from textual_serve.server import Server

DEFAULT_PORT = 8000
WILDCARDS = ("0.0.0.0", "::", "")


def is_loopback(host: str) -> bool:
    """True for addresses only this machine can reach (127.0.0.0/8, ::1, localhost)."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:  # a host name: it may resolve to anything
        return False


def app_command() -> str:
    """The command textual-serve runs per connection (it takes a shell string: quoted here
    from an argv list, so a path with spaces stays one word)."""
    return shlex.join([sys.executable, "-m", "sparkdeck"])


def public_url(host: str, port: int) -> str:
    """The address the browser uses for the page's files and websocket: the host given, or
    this machine's name when listening on every interface."""
    shown = socket.getfqdn() if host in WILDCARDS else host
    if ":" in shown:  # an IPv6 literal
        shown = f"[{shown}]"
    return f"http://{shown}:{port}"


async def refuse(request: web.Request) -> web.Response:
    """Any path outside the token's: no page, no files, no websocket."""
    return web.Response(status=403, text="sparkdeck web: this address needs the URL with "
                                         "its token, as printed when the server started\n")


class DashboardServer(Server):
    """textual-serve's server, mounted under /<token>/ when a token is set."""

    def __init__(self, host: str, port: int, token: str | None,
                 url: str | None = None, command: str | None = None) -> None:
        super().__init__(command or app_command(), host=host, port=port, title="sparkdeck",
                         public_url=url or public_url(host, port))
        self.token = token

    def initialize_logging(self) -> None:
        super().initialize_logging()
        if self.token:  # the access log would write the token out with every request
            logging.getLogger("aiohttp.access").setLevel(logging.WARNING)

    @property
    def address(self) -> str:
        """The URL to open (with the token when there is one)."""
        return f"{self.public_url}/{self.token}/" if self.token else f"{self.public_url}/"

    async def _make_app(self) -> web.Application:
        site = await super()._make_app()
        if self.token is None:
            return site
        outer = web.Application()
        outer.add_subapp(f"/{self.token}", site)  # the page builds its URLs from its router
        outer.router.add_route("*", "/{tail:.*}", refuse)
        return outer


def serve(host: str = "127.0.0.1", port: int = DEFAULT_PORT, url: str | None = None,
          out=None) -> int:
    """Serve the dashboard until interrupted; the token (off loopback) is printed once."""
    out = out or sys.stdout
    token = None if is_loopback(host) else secrets.token_urlsafe(24)
    server = DashboardServer(host, port, token, url)
    if token:
        print(f"sparkdeck web on {host}:{port}, reachable beyond this machine: open "
              f"{server.address} (the token is shown only now)", file=out, flush=True)
    else:
        print(f"sparkdeck web: open {server.address} (from a laptop: "
              f"ssh -L {port}:127.0.0.1:{port} THIS-HOST, then the same address)",
              file=out, flush=True)
    server.serve()
    return 0

