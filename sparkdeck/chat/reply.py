"""One reply being assembled from timed deltas, and the figures measured on it.

TTFT runs from the moment the request was sent to the first generated token, reasoning or
content (a thinking model's first token is a reasoning token, and that is what the user waits
for). Decode speed is measured by the client from the first generated token to the last:
(tokens - 1) / (t_last - t_first), since the first token's time belongs to TTFT. Times are
when the bytes arrived (see chat.client); pieces that came off the socket together share one
stamp, that of the newest bytes among them. When the first token came with others (the reader
was late), that stamp is right for the last of them, not the first: the rate then runs from
there, over the pieces after that first batch. Token counts
come from the server's `usage` when it sends one; otherwise each streamed piece counts as one
token, which engines that stream token by token make exact and others make an estimate
(`tokens_from` says which). The server's own speed (llama.cpp `timings`) is kept beside the
client's figure, never mixed into it.

A reply too short to time is given no client rate (`measurable`): the rate divides the tokens
after the first read by the time from that read's stamp to the last one's, and each stamp may
be late by however long the server's sender or this reader waited for a CPU (a scheduler
period, ~10 ms on a busy 2-core machine). Over less than MIN_DECODE_S that error is more than
10 %. A reply whose tokens after the first read came in one more read was sent as one burst:
its "rate" is one gap between two packets, cut wherever the server's sender and the kernel
happened to cut it, so it takes MIN_READS reads after the first. Against a real
llama-server, replies of 1-2 reads within 1-7 ms came out 0.24x to 3.9x the server's rate, and
one of 22 reads over 65 ms 0.83x; over 100 ms and dozens of reads they agreed within a few
percent. The server's own rate is shown instead, with a word that the client's is not.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from sparkdeck.chat.client import Timed
from sparkdeck.chat.deltas import Content, Finished, Reasoning, Timings, ToolCall, Usage

MIN_DECODE_S = 0.1  # the shortest decode (first read's stamp to the last's) given a rate
MIN_READS = 2  # the fewest separate reads of tokens after the first read, likewise


def measurable(decode_s: float, reads: int) -> bool:
    """Whether a client decode rate over `decode_s` seconds and `reads` separate reads
    after the first one can be trusted (see the module's docstring)."""
    return decode_s >= MIN_DECODE_S and reads >= MIN_READS


def unmeasured_reason(decode_s: float | None, reads: int | None) -> str:
    """Why a reply got no client rate, in a few words."""
    if not reads or not decode_s:
        return "all in one read"
    return f"{reads + 1} reads in {decode_s * 1000:.0f} ms"


@dataclass(frozen=True)
class ReplyFigures:
    """What the user sees beside a reply: speed and size, each with where it came from."""

    ttft_s: float | None
    decode_tps: float | None
    completion_tokens: int | None
    prompt_tokens: int | None
    tokens_from: str  # "usage" (the server's count) or "chunks" (one per streamed piece)
    server_tps: float | None
    elapsed_s: float | None
    finish_reason: str | None
    # the client's decode time and its reads after the first (older saved replies lack them)
    decode_s: float | None = None
    decode_reads: int | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def summary(self) -> str:
        """A one-line caption such as `TTFT 0.21 s · 41.3 tok/s (server 42.0) · 512 tok`."""
        parts = []
        if self.ttft_s is not None:
            parts.append(f"TTFT {self.ttft_s:.2f} s")
        if self.decode_tps is not None:
            speed = f"{self.decode_tps:.1f} tok/s"
            if self.server_tps is not None:
                speed += f" (server {self.server_tps:.1f})"
            parts.append(speed)
        elif self.server_tps is not None:
            parts.append(f"server {self.server_tps:.1f} tok/s")
        note = self.client_note()
        if note is not None:
            parts.append(note)
        if self.completion_tokens is not None:
            approx = "" if self.tokens_from == "usage" else "~"
            parts.append(f"{approx}{self.completion_tokens} tok")
        if self.finish_reason and self.finish_reason != "stop":
            parts.append(self.finish_reason)
        return " · ".join(parts)

    def client_note(self) -> str | None:
        """Why there is no client tok/s for a reply that streamed tokens; None otherwise."""
        if self.decode_tps is not None or self.decode_reads is None:
            return None
        return (
            "client tok/s not measurable ("
            + unmeasured_reason(self.decode_s, self.decode_reads)
            + ")"
        )


@dataclass
class ReplyBuilder:
    """Collects one reply's text and timings from the `Timed` deltas of a stream."""

    sent_at: float
    content: list[str] = field(default_factory=list)
    reasoning: list[str] = field(default_factory=list)
    tool_calls: list[str] = field(default_factory=list)
    first_token_at: float | None = None
    last_token_at: float | None = None
    pieces: int = 0
    first_batch: int = 0  # pieces stamped with the first token's time
    reads: int = 0  # separate reads (stamps) of token pieces after the first one
    usage: Usage | None = None
    timings: Timings | None = None
    finish_reason: str | None = None
    ended_at: float | None = None

    def add(self, timed: Timed) -> None:
        delta = timed.delta
        if isinstance(delta, (Content, Reasoning)):
            (self.content if isinstance(delta, Content) else self.reasoning).append(delta.text)
            if self.first_token_at is None:
                self.first_token_at = timed.at
            if timed.at == self.first_token_at:
                self.first_batch += 1
            elif timed.at != self.last_token_at:
                self.reads += 1
            self.last_token_at = timed.at
            self.pieces += 1
        elif isinstance(delta, ToolCall):
            self.tool_calls.append(delta.raw)
        elif isinstance(delta, Usage):
            self.usage = delta
        elif isinstance(delta, Timings):
            self.timings = delta
        elif isinstance(delta, Finished):
            self.finish_reason = delta.reason
        self.ended_at = timed.at

    @property
    def text(self) -> str:
        return "".join(self.content)

    @property
    def reasoning_text(self) -> str:
        return "".join(self.reasoning)

    def figures(self) -> ReplyFigures:
        completion = self.usage.completion_tokens if self.usage else None
        tokens_from = "usage" if completion is not None else "chunks"
        if completion is None and self.pieces:
            completion = self.pieces
        ttft = self.first_token_at - self.sent_at if self.first_token_at is not None else None
        decode = decode_s = None
        if self.first_token_at is not None and self.last_token_at is not None:
            decode_s = self.last_token_at - self.first_token_at
        if (
            completion
            and completion > 1
            and decode_s is not None
            and measurable(decode_s, self.reads)
        ):
            # the tokens after the first batch's last one, in proportion when a piece is not
            # one token (the server's count from usage)
            after = (completion - 1) * (self.pieces - self.first_batch) / max(self.pieces - 1, 1)
            decode = after / decode_s
        return ReplyFigures(
            ttft_s=ttft,
            decode_tps=decode,
            completion_tokens=completion,
            prompt_tokens=self.usage.prompt_tokens if self.usage else None,
            tokens_from=tokens_from,
            server_tps=self.timings.predicted_per_second if self.timings else None,
            elapsed_s=self.ended_at - self.sent_at if self.ended_at is not None else None,
            finish_reason=self.finish_reason,
            decode_s=decode_s,
            decode_reads=self.reads if self.pieces else None,
        )
