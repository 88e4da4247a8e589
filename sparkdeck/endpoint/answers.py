"""What the endpoint answers itself rather than relaying: the model list, the refusal of a
model that does not run, the refusals of a switch's queue, and what goes into a stream a
switch wait already opened.

A stream that waited for a switch was answered 200 (text/event-stream) before its engine
was up (switching.py): its status is spent, so what follows goes in as SSE events. An
engine's error then becomes a `data: {"error": ...}` event, which OpenAI clients raise as
an API error, and a visible "loading <model>…" chunk may say what it waits for.
"""

from __future__ import annotations

import json
import time
from typing import TYPE_CHECKING, Any

from starlette.responses import JSONResponse, Response
from starlette.types import Send

from sparkdeck.endpoint.refusals import openai_error

if TYPE_CHECKING:
    from sparkdeck.endpoint.upstream import Upstream
    from sparkdeck.endpoint.upstream_http import UpstreamAnswer


def listed_models(upstream: Upstream | None, catalog: Any) -> dict[str, Any]:
    """/v1/models: the running engine's own models, then every preset's model (a request
    for one of those is a switch away, or refused naming the switch)."""
    running = upstream.model_ids if upstream is not None else ()
    data = (
        [{**m, "running": True, "preset": upstream.preset_id} for m in upstream.models]
        if upstream is not None
        else []
    )
    seen = set(running)
    for preset in sorted(catalog.presets.values(), key=lambda p: p.id):
        model = preset.model or preset.id
        if model in seen or (upstream is not None and model in upstream.aliases):
            continue
        seen.add(model)
        data.append(
            {
                "id": model,
                "object": "model",
                "created": 0,
                "owned_by": "sparkdeck",
                "running": False,
                "preset": preset.id,
            }
        )
    return {"object": "list", "data": data}


def wrong_model(model: str, upstream: Upstream, catalog: Any) -> JSONResponse:
    """The refusal of a model that does not run (switching off, or not a preset's): it
    names the running model and the command that switches."""
    named = [p.id for p in catalog.presets.values() if model in (p.id, p.model)]
    running = upstream.model_ids[0] if upstream.model_ids else upstream.name
    switch = f"`sparkdeck launch {named[0]}`" if named else "`sparkdeck launch PRESET`"
    return openai_error(
        404,
        f"model {model!r} is not running: this endpoint serves {running!r}"
        f"{f' (preset {upstream.preset_id})' if upstream.preset_id else ''}. Ask for "
        f"that model, or switch with {switch} (the switch takes the engine down first)",
        "invalid_request_error",
        "model_not_found",
    )


async def error_in_stream(send: Send, error: Response | bytes) -> None:
    """An error after a waiting stream was opened with 200: an SSE `data:` event carrying
    the OpenAI-style error body (the `openai` client raises it), then the end."""
    body = bytes(error.body) if isinstance(error, Response) else error
    try:
        json.loads(body)
    except ValueError:  # an engine's error that is not JSON: wrapped, never sent raw
        body = json.dumps(
            {
                "error": {
                    "message": body.decode("utf-8", "replace")[:2000],
                    "type": "server_error",
                    "code": "engine_error",
                }
            }
        ).encode()
    await send(body_part(b"data: " + body + b"\n\n"))
    await send({"type": "http.response.body", "body": b"", "more_body": False})


async def begin_answer(
    send: Send, answer: UpstreamAnswer, headers: list[tuple[bytes, bytes]], opened: bool
) -> bool:
    """Start relaying the engine's answer: its status and headers, or nothing when a switch
    wait already opened the stream; an engine's error in such a stream becomes an error
    event. False: the answer is complete."""
    if not opened:
        await send(
            {"type": "http.response.start", "status": answer.status_code, "headers": headers}
        )
    elif answer.status_code != 200:
        await error_in_stream(send, await answer.aread())
        return False
    return True


def queue_full(what: str, waiting: int, left_s: float) -> JSONResponse:
    """503 for a request that finds the switch queue ([endpoint] queue) full: `what` is
    switching ("to 'model'", "engines"), Retry-After the seconds it is likely to take."""
    return openai_error(
        503,
        f"the endpoint is switching {what} and {waiting} requests already wait "
        "([endpoint] queue): retry shortly",
        "service_unavailable",
        "switch_queue_full",
        {"Retry-After": str(max(1, round(left_s)))},
    )


def client_closed(target: str) -> JSONResponse:
    """499 (nginx's "client closed request"), logged for a client that left while it
    waited for the switch to `target`."""
    return openai_error(
        499,
        f"the client disconnected while waiting for the switch to {target!r}",
        "client_closed",
        "client_disconnected",
    )


def left_early(engine: str) -> JSONResponse:
    """499, logged for a caller that hung up before the engine `engine` began its answer."""
    return openai_error(
        499,
        f"the client disconnected before the engine {engine} began its answer",
        "client_closed",
        "client_disconnected",
    )


def body_part(data: bytes) -> dict[str, Any]:
    """An ASGI body message with more to come."""
    return {"type": "http.response.body", "body": data, "more_body": True}


def loading_notice(model: str) -> bytes:
    """The visible "loading <model>…" chunk ([endpoint] loading_notice): a reasoning line,
    so chat UIs show it apart from the reply."""
    chunk = {
        "id": "sparkdeck-switch",
        "object": "chat.completion.chunk",
        "created": int(time.time()),
        "model": model,
        "choices": [
            {"index": 0, "delta": {"reasoning_content": f"loading {model}…"}, "finish_reason": None}
        ],
    }
    return b"data: " + json.dumps(chunk, ensure_ascii=False).encode() + b"\n\n"
