"""A streamed response's lines as server-sent events have them: split at LF (CR LF, CR)
only. httpx's iter_lines() also splits at U+2028, U+0085 and the like, which a random test
model's tokens can hold unescaped inside a JSON string (seen in CI). For tests that read
comments and raw lines too; whole events come from httpx-sse."""

from __future__ import annotations

from collections.abc import Iterator

import httpx


def sse_lines(response: httpx.Response) -> Iterator[str]:
    pending = ""
    for text in response.iter_text():
        pending += text
        *lines, pending = pending.replace("\r\n", "\n").replace("\r", "\n").split("\n")
        yield from lines
    if pending:
        yield pending
