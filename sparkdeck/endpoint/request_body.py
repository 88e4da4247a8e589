"""A forwarded request's body: read whole (its `model` decides where it goes), within a
memory bound shared by all requests, and parsed.

Two bounds. One body is at most MAX_REQUEST; and all the bodies the endpoint holds at once,
across requests, are at most HELD_AT_ONCE. Without the second, bodies sent together were all
held at once: six concurrent 50 MB bodies took the service to 1,019 MiB RSS (issue 26). A
body announced by Content-Length reserves its whole size before a byte of it is read: over
MAX_REQUEST is 413 at once, no room is 503 with Retry-After at once (both without reading
it). A chunked body reserves as it arrives and is refused when a piece finds no room. The
reservation is given back once the body has gone to the engine (or been refused), not when
the answer ends: a stream may run for minutes and needs its request no longer.

A body costs more than its size at its peak: parsing makes a decoded copy and the parsed
strings (freed again at once), and asyncio copies what the socket does not take at once when
it is sent on. So the total is one MAX_REQUEST, not several
(tests/integration/test_endpoint_bodies.py measures the service's RSS with ten 50 MB
bodies sent at once).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

from starlette.responses import JSONResponse
from starlette.types import Receive, Scope

from sparkdeck.endpoint.refusals import openai_error

MAX_REQUEST = 64 * 2**20  # one body
HELD_AT_ONCE = 64 * 2**20  # every body held at once, together
RETRY_AFTER_S = 1  # a body in the way is usually sent on within a second


class BodyBudget:
    """Bytes of request bodies held now, against a total. One event loop uses it: no lock."""

    def __init__(self, total: int = HELD_AT_ONCE) -> None:
        self.total, self.held = total, 0

    def take(self, size: int) -> bool:
        if self.held + size > self.total:
            return False
        self.held += size
        return True

    def give(self, size: int) -> None:
        self.held -= size


@dataclass(eq=False)
class HeldBody:
    """A request's body (or why it was refused) and the share of the budget it holds."""

    budget: BodyBudget
    body: bytearray | bytes | None = None
    refusal: JSONResponse | None = None
    taken: int = field(default=0)

    def release(self) -> None:
        """Give the share back and drop the body (once: later calls do nothing)."""
        self.budget.give(self.taken)
        self.taken, self.body = 0, None


def too_large() -> JSONResponse:
    return openai_error(
        413,
        f"the request body is over {MAX_REQUEST // 2**20} MiB",
        "invalid_request_error",
        "request_too_large",
    )


def no_room() -> JSONResponse:
    return openai_error(
        503,
        "the endpoint holds as many request bodies as it may "
        f"({HELD_AT_ONCE // 2**20} MiB together): retry in a moment",
        "service_unavailable",
        "too_many_bodies",
        {"Retry-After": str(RETRY_AFTER_S)},
    )


def announced_length(scope: Scope) -> int | None:
    """Content-Length, when the body is framed by it (not chunked) and it is a number."""
    headers = dict(scope["headers"])
    if b"transfer-encoding" in headers:
        return None
    try:
        return int(headers[b"content-length"])
    except (KeyError, ValueError):
        return None


async def read_body(scope: Scope, receive: Receive, budget: BodyBudget) -> HeldBody:
    """The whole body, holding its share of `budget`; or a refusal (413, 503, or 499 for a
    client gone mid-body). The caller releases it in every case."""
    held = HeldBody(budget)
    announced = announced_length(scope)
    if announced is not None:
        if announced > MAX_REQUEST:
            held.refusal = too_large()
            return held
        if not budget.take(announced):
            held.refusal = no_room()
            return held
        held.taken = announced
    body, more = bytearray(), True
    while more:
        message = await receive()
        if message["type"] == "http.disconnect":
            # the client left, or uvicorn dropped a malformed body (it answered that 400)
            held.refusal = openai_error(
                499,
                "the connection ended before the whole body came",
                "client_closed",
                "client_disconnected",
            )
            return held
        chunk = message.get("body", b"")
        need = len(body) + len(chunk) - held.taken  # > 0 only for a body without a length
        if need > 0:
            if len(body) + len(chunk) > MAX_REQUEST:
                held.refusal = too_large()
                return held
            if not budget.take(need):
                held.refusal = no_room()
                return held
            held.taken += need
        body += chunk  # a bytearray grows in place: no second copy of what came before
        more = message.get("more_body", False)
    held.body = body
    return held


@dataclass(frozen=True)
class Asked:
    """What the forwarder needs from a body: the model it names, and whether it streams."""

    model: str | None
    stream: bool


def _bad_body(message: str, code: str = "invalid_json") -> JSONResponse:
    return openai_error(400, message, "invalid_request_error", code)


def asked_of(body: bytes | bytearray) -> Asked | JSONResponse:
    """The model and stream flag of a JSON object body; a 400 for anything else. The parsed
    body is not kept: it is as large as the body, and only these two fields are needed.
    No message repeats the body's text (it goes to the request log)."""
    if not body.strip():
        return _bad_body("the request body is empty: send a JSON object", "invalid_body")
    try:
        payload = json.loads(body)
    except RecursionError:
        return _bad_body("the request body is JSON nested too deeply to read")
    except UnicodeDecodeError as exc:
        return _bad_body(f"the request body is not UTF-8 (byte {exc.start})")
    except json.JSONDecodeError as exc:
        return _bad_body(
            f"the request body is not JSON: {exc.msg} at line {exc.lineno} column {exc.colno}"
        )
    if not isinstance(payload, dict):
        return _bad_body("the request body must be a JSON object", "invalid_body")
    model = payload.get("model")
    return Asked(model if isinstance(model, str) else None, payload.get("stream") is True)


def with_model(body: bytes | bytearray, model: str) -> bytes | JSONResponse:
    """The body with its `model` replaced (it parsed once already, so it parses again); a
    400 if writing it back out nests deeper than the encoder may go."""
    payload = json.loads(body)
    payload["model"] = model
    try:
        return json.dumps(payload).encode()
    except RecursionError:
        return _bad_body("the request body is JSON nested too deeply to rewrite")
