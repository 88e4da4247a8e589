"""How a chat fails, in words fit to show a user as they are: the typed errors every chat
client (the pane, `sparkdeck chat`, the benchmark) catches, and the server's own message
read from an error answer (its JSON error, or an HTML page's title) without reading an
endless body.
"""

from __future__ import annotations

import json
import re
from typing import Any

import httpx

from sparkdeck.chat.deltas import error_in
from sparkdeck.http_limits import read_head
from sparkdeck.text_safety import excerpt

_ERROR_BODY = 64 * 1024  # of an error answer, only the start is read
_TITLE = re.compile(r"<title[^>]*>(.*?)</title>", re.I | re.S)
_TAG = re.compile(r"<[^>]*>")


class ChatError(Exception):
    """Base of every chat failure; the message is fit to show a user as is."""


class ServerUnreachable(ChatError):
    """Nothing answered (refused, DNS, connect timeout) or the connection broke mid-reply."""


class EngineNotAnswering(ServerUnreachable):
    """The engine took the connection but sent no reply within the stated time (hung)."""

    def __init__(self, url: str, seconds: float):
        self.url, self.seconds = url, seconds
        super().__init__(
            f"the engine is not answering (no reply from {url} within "
            f"{seconds:g} s): it may be hung or overloaded; check its log "
            "(sparkdeck logs) or restart it"
        )


class HTTPErrorReply(ChatError):
    """The server refused the request with an HTTP error; `server_message` is its own words."""

    def __init__(self, status: int, server_message: str, url: str):
        self.status, self.server_message, self.url = status, server_message, url
        super().__init__(f"HTTP {status} from {url}: {server_message}")


class StreamErrorEvent(ChatError):
    """The server reported an error inside the event stream (after HTTP 200)."""

    def __init__(self, server_message: str, code: Any = None):
        self.server_message, self.code = server_message, code
        suffix = f" (code {code})" if code not in (None, "") else ""
        super().__init__(f"the server stopped the reply: {server_message}{suffix}")


class ProtocolError(ChatError):
    """The server answered, but not with an OpenAI chat event stream."""


def _error_body(response: httpx.Response) -> bytes:
    """The start of an error answer: enough for its message, never an endless body."""
    try:
        return read_head(response, _ERROR_BODY)
    except httpx.HTTPError:  # the body broke off: the status alone still says something
        return b""


def server_message(response: httpx.Response) -> str:
    """The server's own error message when the body carries one, else its content type and
    a short, cleaned excerpt (an HTML error page is reduced to its title or its text)."""
    text = _error_body(response).decode("utf-8", "replace")
    try:
        found = error_in(json.loads(text))
    except (ValueError, RecursionError):
        found = None
    if found:
        return found[0]
    kind = response.headers.get("content-type", "").partition(";")[0].strip()
    if "html" in kind.lower():
        title = _TITLE.search(text)
        text = title.group(1) if title else _TAG.sub(" ", text)
    snippet = excerpt(text, 160)
    kind = excerpt(kind, 60) or "no content type"
    if not snippet:
        return f"{kind}, empty body ({excerpt(response.reason_phrase, 60) or 'no message'})"
    return f"{kind}: {snippet}"
