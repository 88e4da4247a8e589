"""Turn one streamed reply (timestamped deltas from sparkdeck.chat) into RequestFigures.

Pure: the clock readings come with the deltas. TTFT runs from the moment the request was
sent to the first event that carried generated text; a role-only or empty chunk carries no
text and is never counted (the chat client yields no Content for it). Reasoning text counts
as generated: a thinking model's first token is a token the engine decoded.
"""

from __future__ import annotations

from collections.abc import Iterable

from sparkdeck.bench.stats import RequestFigures
from sparkdeck.chat.client import Timed
from sparkdeck.chat.deltas import Content, Reasoning, Timings, Usage


def request_figures(sent_at: float, events: Iterable[Timed], done_at: float, *,
                    prompt_fallback: int | None, prompt_fallback_source: str,
                    error: str | None = None) -> RequestFigures:
    """Figures from the events one request produced (consumed here, in order).

    Token counts prefer the server's `usage`; without it the prompt count is the one the
    prompt was sized with, and the output count is the number of events that carried text
    (engines stream one token per event unless told otherwise).
    """
    first_at: float | None = None
    last_at: float | None = None
    text_events: set[float] = set()
    usage: Usage | None = None
    cached = 0
    for timed in events:
        delta = timed.delta
        if isinstance(delta, (Content, Reasoning)) and delta.text:
            if first_at is None:
                first_at = timed.at
            last_at = timed.at
            text_events.add(timed.at)  # one SSE event may carry reasoning and content
        elif isinstance(delta, Usage):
            usage = delta  # the last one wins: vLLM's continuous stats grow per chunk
        elif isinstance(delta, Timings) and delta.cache_n:
            cached = delta.cache_n
    prompt, prompt_source = prompt_fallback, prompt_fallback_source
    if usage is not None and usage.prompt_tokens is not None:
        prompt, prompt_source = usage.prompt_tokens, "usage"
    output, output_source = (len(text_events) or None), "chunks"
    if usage is not None and usage.completion_tokens is not None:
        output, output_source = usage.completion_tokens, "usage"
    return RequestFigures(
        ok=error is None and first_at is not None,
        error=error if error is not None else (None if first_at is not None
                                               else "the reply carried no generated text"),
        sent_at=sent_at, first_at=first_at, last_at=last_at, done_at=done_at,
        prompt_tokens=prompt, prompt_source=prompt_source, output_tokens=output,
        output_source=output_source, cached_tokens=min(cached, prompt or 0),
        text_chunks=len(text_events))
