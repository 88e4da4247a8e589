"""What the endpoint measures of one answer while it passes through, without keeping its text.

Bytes are forwarded untouched; the meter only notes when server-sent events arrive (one
monotonic clock, stamped where the bytes are read) and keeps the answer's tail, where the
figures are: the `usage` object (OpenAI's, sent in a final chunk when the client asked for
`stream_options.include_usage`), else llama.cpp's `timings` (`prompt_n`, `predicted_n`),
else the count of events (one token each on llama.cpp and vLLM: an estimate, labelled
"chunks"). A non-streamed answer is one JSON body: its `usage`. The tail is dropped with the
meter; nothing of the text reaches the request log.
"""

from __future__ import annotations

import json
import time
from typing import Any

TAIL_BYTES = 64 * 1024  # the last events of a stream: usage and timings come last
BODY_BYTES = 4 * 2**20  # a non-streamed answer is parsed for its usage up to this size


class Meter:
    def __init__(self, arrived: float, stream: bool, readable: bool) -> None:
        self.arrived = arrived
        self.stream = stream
        self.readable = readable  # not compressed: its events can be seen
        self.first: float | None = None  # first event (stream) / first byte (whole answer)
        self.last: float | None = None
        self.events = 0
        self.first_events = 0  # events in the first read that had any: they came at `first`
        self._kept = bytearray()
        self._whole = True
        self._edge = b""
        self.disconnected = False  # the client went away before the answer ended
        self.failed: str | None = None  # the engine's answer broke off (its error)

    def feed(self, chunk: bytes) -> None:
        now = time.monotonic()
        if self.stream:
            # "data:" can be cut between two reads: look at the last 4 bytes of the
            # previous one too (too short to hold a whole "data:" of their own)
            found = (self._edge + chunk).count(b"data:")
            self._edge = (self._edge + chunk)[-4:]
            if found:
                if self.first is None:
                    self.first, self.first_events = now, found
                self.events += found
                self.last = now
            self._kept += chunk
            if len(self._kept) > TAIL_BYTES:
                del self._kept[:-TAIL_BYTES]
        else:
            self.first = self.first or now
            self.last = now
            if len(self._kept) + len(chunk) <= BODY_BYTES:
                self._kept += chunk
            else:
                self._whole = False

    def stream_ended(self) -> bool:
        """The stream's closing `data: [DONE]` came through: a client may hang up after it
        (OpenAI's client does) without waiting for the body's last empty chunk."""
        return self.stream and bytes(self._kept[-32:]).rstrip().endswith(b"data: [DONE]")

    def figures(self) -> dict[str, Any]:
        """Fields of a RequestRecord: tokens, where they came from, TTFT, decode speed."""
        ended = time.monotonic()
        prompt, output, source = self._tokens() if self.readable else (None, None, None)
        ttft = (self.first - self.arrived) if self.stream and self.first else None
        tps = None
        # the tokens that came after the first read, over the time they took: the first
        # read's own tokens (one per event, as llama.cpp and vLLM send them) took none, so a
        # burst read at once gives no speed rather than an absurd one
        after = (output or 0) - max(self.first_events, 1)
        if self.stream and after > 0 and self.first and self.last and self.last > self.first:
            tps = after / (self.last - self.first)
        return {
            "prompt_tokens": prompt,
            "output_tokens": output,
            "tokens_from": source,
            "ttft_s": round(ttft, 6) if ttft is not None else None,
            "decode_tps": round(tps, 2) if tps is not None else None,
            "duration_s": round(ended - self.arrived, 6),
            "error": "the client disconnected" if self.disconnected else self.failed,
        }

    def _tokens(self) -> tuple[int | None, int | None, str | None]:
        if not self.stream:
            if not self._whole:
                return None, None, None
            try:
                usage = json.loads(self._kept).get("usage")
            except (ValueError, AttributeError, RecursionError):
                return None, None, None
            return _from_usage(usage)
        timings: tuple[int | None, int | None, str | None] | None = None
        for event in reversed(bytes(self._kept).split(b"\n\n")):
            line = event.strip()
            if not line.startswith(b"data:") or line.endswith(b"[DONE]"):
                continue
            try:
                data = json.loads(line[5:])
            except (ValueError, RecursionError):
                continue  # the first event of a cut tail
            if not isinstance(data, dict):
                continue
            usage = _from_usage(data.get("usage"))
            if usage[2] is not None:
                return usage
            found = data.get("timings")
            if timings is None and isinstance(found, dict):
                # prompt_n counts only what was computed: the cached part is cache_n
                prompt, cached = _int(found.get("prompt_n")), _int(found.get("cache_n"))
                timings = (
                    prompt + (cached or 0) if prompt is not None else None,
                    _int(found.get("predicted_n")),
                    "timings",
                )
        if timings is not None and timings[1] is not None:
            return timings
        # every event but the closing [DONE] and the one carrying finish_reason alone
        counted = max(self.events - 2, 0) if self.events else None
        return None, counted, "chunks" if counted is not None else None


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _from_usage(usage: Any) -> tuple[int | None, int | None, str | None]:
    if not isinstance(usage, dict):
        return None, None, None
    return _int(usage.get("prompt_tokens")), _int(usage.get("completion_tokens")), "usage"
