"""The endpoint's refusals: each answered in OpenAI's error shape and written as exactly one
line of the request log, whichever part of the endpoint refused.

Three parts refuse a request before the forwarder's own checks (model, switch, engine): the
API key (KeyRequired, outermost, so nothing else runs for a caller without it), Starlette's
router for the paths the forwarder does not take (an unknown path, a wrong method), and the
body (request_body.py: too large, no room to hold it, not JSON). A refusal that left no
trace would hide exactly the requests an owner wants to see: someone guessing the key.
"""

from __future__ import annotations

import asyncio
import hmac
import time
from typing import Any

from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.types import ASGIApp, Receive, Scope, Send

from sparkdeck.endpoint.request_log import RequestLog, RequestRecord

KEY_MISSING = (
    "this endpoint needs its API key: send `Authorization: Bearer <key>` (the key "
    "is in the service's environment; `sparkdeck endpoint` names the variable)"
)
# Starlette's router raises these bare (no detail): say what a client can do about them
_ROUTING = {
    404: (
        "unknown_url",
        (
            "no such path: the endpoint serves POST "
            "/v1/chat/completions, /v1/completions, /v1/embeddings and "
            "GET /v1/models"
        ),
    ),
    405: ("method_not_allowed", "this path does not take {method}"),
}


def openai_error(
    status: int, message: str, kind: str, code: str, headers: dict[str, str] | None = None
) -> JSONResponse:
    """An error body shaped like OpenAI's, which its clients show as the message."""
    return JSONResponse(
        {"error": {"message": message, "type": kind, "code": code}},
        status_code=status,
        headers=headers,
    )


def arrival(scope: Scope) -> dict[str, Any]:
    """The request-log fields known when a request arrives (its body not read yet)."""
    client = scope.get("client") or ("?", 0)
    return {
        "time": time.time(),
        "client": f"{client[0]}:{client[1]}",
        "path": scope["path"],
        "model": None,
        "stream": False,
    }


def write_record(log: RequestLog, record: RequestRecord) -> None:
    """Append off the event loop (a file write must not stall the streams it serves); the
    order of two lines written at once is not a promise."""
    asyncio.get_running_loop().run_in_executor(None, log.append, record)


def log_refusal(log: RequestLog, record: dict[str, Any], response: Response) -> None:
    """One request-log line for a refusal: its status and the message the client got."""
    import json

    body = bytes(response.body)
    try:
        message = json.loads(body)["error"]["message"]
    except (ValueError, KeyError, TypeError):
        message = body.decode("utf-8", "replace")[:200]
    write_record(log, RequestRecord(**record, status=response.status_code, error=message))


def bearer_token(scope: Scope) -> bytes | None:
    """The token of the request's `Authorization: Bearer` header. The scheme is matched
    without regard to case (RFC 7235 2.1: `bearer KEY` is the same credential)."""
    shown = next((v for k, v in scope["headers"] if k == b"authorization"), b"")
    scheme, _, token = shown.strip().partition(b" ")
    return token.strip() if scheme.lower() == b"bearer" and token.strip() else None


class KeyRequired:
    """ASGI middleware: with an API key set, every request shows it as a Bearer token, on
    every address (loopback too); a request without it is refused with 401 and logged."""

    def __init__(self, app: ASGIApp, key: str | None, log: RequestLog) -> None:
        self.app, self._key, self._log = app, key.encode() if key else None, log

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if self._key is not None and scope["type"] == "http":
            token = bearer_token(scope)
            # compare_digest: the time taken says nothing about how much of a guess was right
            if token is None or not hmac.compare_digest(token, self._key):
                refusal = openai_error(401, KEY_MISSING, "invalid_request_error", "invalid_api_key")
                await refusal(scope, receive, send)
                log_refusal(self._log, arrival(scope), refusal)
                return
        await self.app(scope, receive, send)


def routing_refusals(log: RequestLog) -> dict[Any, Any]:
    """Starlette exception handlers: its router's 404 (unknown path) and 405 (wrong method)
    in OpenAI's shape, each logged like every other refusal."""

    async def refused(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, HTTPException)
        code, message = _ROUTING.get(exc.status_code, ("invalid_request", exc.detail))
        refusal = openai_error(
            exc.status_code,
            message.replace("{method}", request.method),
            "invalid_request_error",
            code,
            dict(exc.headers or {}),
        )
        log_refusal(log, arrival(request.scope), refusal)
        return refusal

    return {HTTPException: refused}
