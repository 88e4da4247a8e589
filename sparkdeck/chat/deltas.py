"""Typed pieces of a streamed chat reply, and how one OpenAI-style chunk becomes them.

Engines disagree on where things go in a `chat.completion.chunk`: reasoning arrives as
`delta.reasoning` (new vLLM, Ollama) or `delta.reasoning_content` (older vLLM, SGLang,
llama.cpp); usage comes in its own chunk with empty `choices` when `stream_options.include_usage`
is set (or in every chunk with vLLM's `continuous_usage_stats`); llama.cpp adds a `timings`
object with the server's own speed. This module absorbs those differences so the rest of
sparkdeck sees one vocabulary. It is pure: no I/O, no clock.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from sparkdeck.text_safety import clean, excerpt


@dataclass(frozen=True)
class Opened:
    """The server answered with an event stream (HTTP status and headers arrived)."""

    status: int


@dataclass(frozen=True)
class Content:
    """A piece of the visible answer."""

    text: str
    choice: int = 0


@dataclass(frozen=True)
class Reasoning:
    """A piece of the model's thinking; `field` is the key the engine used."""

    text: str
    field: str = "reasoning_content"
    choice: int = 0


@dataclass(frozen=True)
class ToolCall:
    """One tool-call fragment exactly as the server sent it (shown raw, never executed)."""

    raw: str
    index: int = 0
    choice: int = 0


@dataclass(frozen=True)
class Usage:
    """Token counts the server reported (`usage`)."""

    prompt_tokens: int | None
    completion_tokens: int | None
    total_tokens: int | None


@dataclass(frozen=True)
class Timings:
    """llama.cpp's own measurements of this request (`timings`)."""

    predicted_per_second: float | None
    prompt_per_second: float | None
    predicted_n: int | None
    prompt_n: int | None
    cache_n: int | None


@dataclass(frozen=True)
class Finished:
    """A choice ended; `reason` is the server's finish_reason (stop, length, tool_calls...)."""

    reason: str
    choice: int = 0


@dataclass(frozen=True)
class Done:
    """The `[DONE]` sentinel: the server closed the stream normally."""


Delta = Opened | Content | Reasoning | ToolCall | Usage | Timings | Finished | Done

# Newest name first: servers in transition (vLLM ~0.10) sent the same text under both keys,
# which must not be shown twice.
REASONING_FIELDS = ("reasoning", "reasoning_content")


# Counts and rates a server reports are read only when they are plausible: Python's json
# accepts NaN, Infinity and 400-digit numbers, and int(nan) raises ValueError, int(inf)
# OverflowError. A figure outside this range is treated as not reported.
_LARGEST = 1e15


def _float(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    try:
        number = float(value)  # a huge int overflows here, not later
    except OverflowError:
        return None
    # every figure read here is a count or a rate: never negative
    return number if math.isfinite(number) and 0 <= number <= _LARGEST else None


def _int(value: Any) -> int | None:
    """A count (token counts, indices): whole, finite, not negative."""
    number = _float(value)
    return int(number) if number is not None else None


def _choice_deltas(choice: Mapping[str, Any]) -> list[Delta]:
    index = _int(choice.get("index")) or 0
    delta = choice.get("delta")
    found: list[Delta] = []
    if isinstance(delta, Mapping):
        for key in REASONING_FIELDS:
            text = delta.get(key)
            if isinstance(text, str) and text:
                found.append(Reasoning(clean(text), key, index))
                break
        text = delta.get("content")
        if isinstance(text, str) and text:
            found.append(Content(clean(text), index))
        calls = delta.get("tool_calls")
        if isinstance(calls, list):
            for call in calls:
                position = _int(call.get("index")) if isinstance(call, Mapping) else None
                found.append(
                    ToolCall(clean(json.dumps(call, ensure_ascii=False)), position or 0, index)
                )
    reason = choice.get("finish_reason")
    if isinstance(reason, str) and reason:
        found.append(Finished(excerpt(reason, 40), index))
    return found


def parse_chunk(chunk: Mapping[str, Any]) -> list[Delta]:
    """Every delta one decoded `chat.completion.chunk` carries, in a stable order."""
    found: list[Delta] = []
    choices = chunk.get("choices")
    if isinstance(choices, list):
        for choice in choices:
            if isinstance(choice, Mapping):
                found.extend(_choice_deltas(choice))
    usage = chunk.get("usage")
    if isinstance(usage, Mapping):
        found.append(
            Usage(
                _int(usage.get("prompt_tokens")),
                _int(usage.get("completion_tokens")),
                _int(usage.get("total_tokens")),
            )
        )
    timings = chunk.get("timings")
    if isinstance(timings, Mapping):
        found.append(
            Timings(
                _float(timings.get("predicted_per_second")),
                _float(timings.get("prompt_per_second")),
                _int(timings.get("predicted_n")),
                _int(timings.get("prompt_n")),
                _int(timings.get("cache_n")),
            )
        )
    return found


def error_in(payload: Any) -> tuple[str, Any] | None:
    """The (message, code) of an error object in a decoded body or event, else None; the
    message is cleaned and cut short (it is the server's text, shown to a user)."""
    found = _error_in(payload)
    if found is None:
        return None
    code = found[1]
    if isinstance(code, str):
        code = excerpt(code, 40)
    elif not isinstance(code, int) or isinstance(code, bool) or abs(code) > _LARGEST:
        code = None
    return excerpt(found[0], _MESSAGE_LIMIT), code


_MESSAGE_LIMIT = 300


def _error_in(payload: Any) -> tuple[str, Any] | None:
    """The (message, code) of an error object in a decoded body or event, else None.

    Shapes seen: `{"error": {"message", "type", "code"}}` (OpenAI, llama.cpp, new vLLM, Ollama,
    SGLang), `{"object": "error", "message"}` (older vLLM, flat), `{"error": "text"}`, and
    FastAPI's `{"detail": ...}` for a body that fails validation.
    """
    if not isinstance(payload, Mapping):
        return None
    error = payload.get("error")
    if isinstance(error, Mapping):
        message = error.get("message") or error.get("msg") or json.dumps(error)
        return str(message), error.get("code")
    if isinstance(error, str) and error:
        return error, payload.get("code")
    if payload.get("object") == "error":
        return str(payload.get("message") or json.dumps(payload)), payload.get("code")
    detail = payload.get("detail")
    if detail:
        if isinstance(detail, list):
            detail = "; ".join(
                str(d.get("msg", d)) if isinstance(d, Mapping) else str(d) for d in detail
            )
        return str(detail), None
    return None
