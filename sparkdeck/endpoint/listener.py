"""Where the endpoint listens and whether it may: its address, its API key, the refusal of
an unsafe exposure, and its own uvicorn server beside the service's API."""

from __future__ import annotations

import ipaddress
import os
import socket
from typing import TYPE_CHECKING, Any

from sparkdeck.config.settings import EndpointSettings

if TYPE_CHECKING:
    pass

PORT_ENV = "SPARKDECK_ENDPOINT_PORT"  # overrides [endpoint] port (tests use a free port)


class EndpointRefused(Exception):
    """The endpoint's settings are unsafe (the LAN without a key, or no key where the owner
    asked for one on loopback too): the service refuses to start and says how to fix it."""


def listen_address(settings: EndpointSettings) -> tuple[str, int]:
    port = os.environ.get(PORT_ENV)
    return settings.host, int(port) if port else settings.port


def api_key(settings: EndpointSettings) -> str | None:
    return os.environ.get(settings.api_key_env) or None


def is_loopback(host: str) -> bool:
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return host == "localhost"


def check_exposure(settings: EndpointSettings) -> None:
    """Raise EndpointRefused for a LAN address without an API key, and for loopback without
    one when [endpoint] require_key_on_loopback asks for it (loopback is every local user's:
    without a key any of them may use the engine, and switch it with switch_on_request)."""
    host, _ = listen_address(settings)
    if api_key(settings) is not None:
        return
    if not is_loopback(host):
        raise EndpointRefused(
            f"[endpoint] host = {host!r} would open the OpenAI endpoint to the network "
            f"without an API key: set one in the environment variable "
            f'{settings.api_key_env} where the service starts, or use host = "127.0.0.1" '
            "(and `ssh -L` to reach it from another machine)"
        )
    if settings.require_key_on_loopback:
        raise EndpointRefused(
            "[endpoint] require_key_on_loopback = true, but the environment variable "
            f"{settings.api_key_env} holds no API key: set one where the service starts "
            "(the unit's Environment= or the shell), or set require_key_on_loopback = false "
            "(every user of this machine can then use the endpoint)"
        )


def open_listener(settings: EndpointSettings) -> socket.socket:
    """The endpoint's TCP socket (OSError when the port is taken)."""
    check_exposure(settings)
    host, port = listen_address(settings)
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.create_server((host, port), family=family, backlog=256)
    # Every answer's bytes go out at once (no Nagle). asyncio turns Nagle off only on sockets
    # whose `proto` says TCP, and an accepted socket copies the listener's, which is 0 here:
    # a streamed answer (headers, then the body in chunks) to a client on a kept-alive
    # connection waited for the client's delayed ACK, 40 ms on Linux, before its first token.
    # Linux copies TCP_NODELAY from the listener to each connection it accepts.
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    sock.set_inheritable(False)
    return sock


def endpoint_line(endpoint: dict[str, Any] | None) -> str | None:
    """The OpenAI endpoint's own state as the service reports it, in one line (None from a
    service too old to say)."""
    if not endpoint:
        return None
    if endpoint.get("on"):
        return f"the OpenAI endpoint is on: {endpoint.get('url')}"
    where = f" on {endpoint['address']}" if endpoint.get("address") else ""
    fix = f" ({endpoint['fix']})" if endpoint.get("fix") else ""
    return f"the OpenAI endpoint is off: {endpoint.get('error')}{where}{fix}"
