"""Who may use `sparkdeck web`: the checks every request passes before textual-serve sees it.

The dashboard drives the engine (stop, launch) and shows saved conversations, so the web
server must be as closed as the 0600 service socket it stands beside. Loopback is not a
boundary: every local user, and every page open in the user's browser, can reach
127.0.0.1. So, the way Jupyter does it:

- **A secret on every address.** The URL printed at start carries `?token=...`; the first
  request with it sets an HttpOnly, SameSite=Strict cookie and is redirected to the same
  address without the token (a reload works, and the token leaves the address bar and the
  browser's history). Every other request needs the cookie; nothing is served without it.
- **Host** must be one this server is reached at (the bound address, loopback names, the
  public URL's host, this machine's own names and addresses when listening on all of them):
  a DNS-rebinding page (evil.example resolving to 127.0.0.1) is refused even with a cookie.
- **Origin**, where a browser sends one, must be this server's own; the websocket must carry
  one. A page on another origin - another port of 127.0.0.1 included, which is the same
  *site* and so gets the cookie - cannot open the websocket that types keys.

The token is compared in constant time and never logged (web.py keeps it out of the log).
"""

from __future__ import annotations

import hmac
import ipaddress
import socket
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from urllib.parse import urlsplit

from aiohttp import web
from aiohttp.typedefs import Middleware

WILDCARDS = ("0.0.0.0", "::", "")
LOOPBACK_NAMES = frozenset({"localhost", "127.0.0.1", "::1"})
TOKEN_PARAM = "token"

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def cookie_name(port: int) -> str:
    """Cookies ignore ports: one per port, so two servers on one host do not clobber each
    other's."""
    return f"sparkdeck-web-{port}"


def _split_host(value: str) -> tuple[str, int | None]:
    """`host[:port]` (a bracketed IPv6 literal included) as (lower-case host, port)."""
    try:
        parts = urlsplit(f"//{value}")
        return (parts.hostname or "").lower(), parts.port
    except ValueError:  # a port that is not a number, a broken bracket
        return "", None


def local_names() -> frozenset[str]:
    """This machine's names and the addresses of its interfaces: how a browser on the LAN
    reaches a server listening on every address."""
    import psutil

    names = {socket.gethostname().lower(), socket.getfqdn().lower()}
    for addresses in psutil.net_if_addrs().values():
        for address in addresses:
            if address.family in (socket.AF_INET, socket.AF_INET6):
                names.add(address.address.split("%", 1)[0].lower())
    return frozenset(names)


@dataclass(frozen=True)
class Doors:
    """The token, and the hosts and ports this server answers as."""

    token: str
    port: int
    hosts: frozenset[str]
    ports: frozenset[int]

    @classmethod
    def for_server(
        cls, token: str, host: str, port: int, public_url: str, extra: Iterable[str] = ()
    ) -> Doors:
        public = urlsplit(public_url)
        hosts = set(LOOPBACK_NAMES) | {h.lower() for h in extra}
        if host not in WILDCARDS:
            hosts.add(host.lower().strip("[]"))
        ports = {port}
        if public.hostname:
            hosts.add(public.hostname.lower())
            ports.add(public.port or (443 if public.scheme == "https" else 80))
        return cls(token, port, frozenset(hosts), frozenset(ports))

    @property
    def cookie(self) -> str:
        return cookie_name(self.port)

    def host_ok(self, value: str | None) -> bool:
        host, port = _split_host(value or "")
        if port is None:  # the scheme's own port, 80 or 443 (a TLS proxy's public URL)
            return host in self.hosts and bool({80, 443} & self.ports)
        return host in self.hosts and port in self.ports

    def origin_ok(self, origin: str | None, required: bool) -> bool:
        if origin is None:
            return not required
        parts = urlsplit(origin)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            return False  # "null" (a sandboxed frame, a file), or nonsense
        port = parts.port or (443 if parts.scheme == "https" else 80)
        return parts.hostname.lower() in self.hosts and port in self.ports

    def matches(self, shown: str | None) -> bool:
        return shown is not None and hmac.compare_digest(shown.encode(), self.token.encode())


def refusal(status: int, why: str) -> web.Response:
    return web.Response(status=status, text=f"sparkdeck web: {why}\n")


def is_websocket_route(request: web.Request) -> bool:
    return request.path == "/ws"


def guard(doors: Doors) -> Middleware:
    """aiohttp middleware: Host, then Origin, then the token or its cookie."""

    @web.middleware
    async def check(request: web.Request, handler: Handler) -> web.StreamResponse:
        if not doors.host_ok(request.headers.get("Host")):
            return refusal(
                403,
                "this server is not reached at that Host (a page that "
                "renamed itself to this address is refused); open the URL "
                "printed when the server started",
            )
        websocket = is_websocket_route(request)
        if not doors.origin_ok(request.headers.get("Origin"), required=websocket):
            return refusal(403, "requests from another site's page are refused")
        shown = request.query.get(TOKEN_PARAM)
        if doors.matches(shown):
            if request.method == "GET" and not websocket:
                # keep the secret out of the address bar and history: cookie, then redirect
                query = {k: v for k, v in request.query.items() if k != TOKEN_PARAM}
                target = request.rel_url.with_query(query)
                response = web.HTTPFound(str(target))
                set_cookie(response, doors)
                raise response
        elif not doors.matches(request.cookies.get(doors.cookie)):
            return refusal(
                403,
                "this address needs the URL with its token, as printed when "
                "`sparkdeck web` started (run it again for a new one)",
            )
        if websocket and not web.WebSocketResponse().can_prepare(request).ok:
            return refusal(400, "/ws takes only a websocket")
        return await handler(request)

    return check


def set_cookie(response: web.StreamResponse, doors: Doors) -> None:
    response.set_cookie(doors.cookie, doors.token, httponly=True, samesite="Strict", path="/")


def loopback_only(host: str) -> bool:
    """True for addresses only this machine can reach (127.0.0.0/8, ::1, localhost)."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:  # a host name: it may resolve to anything
        return False
