"""Concurrent streamed chat requests against a real engine, and sparkdeck sampling it.

Shared by the llama-server and vLLM metrics tests: both prove that sparkdeck's numbers
agree with what the engine itself counted under the same load.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import time
from dataclasses import dataclass, field
from typing import Any

import httpx
from httpx_sse import EventSource
from prometheus_client.parser import text_string_to_metric_families

from sparkdeck.metrics.reader import MetricsReader
from sparkdeck.metrics.sampler import MetricsPlan, MetricsSampler
from sparkdeck.metrics.snapshot import EngineMetrics


@dataclass
class LoadResult:
    """What the responses themselves said: usage and (llama.cpp) timings, per stream."""

    completion_tokens: int = 0
    predicted_n: int = 0
    predicted_ms: float = 0.0
    streams_ok: int = 0
    errors: list[str] = field(default_factory=list)
    mid_reply: int = 0  # streams that have had their first token and not yet ended


async def _one_stream(
    client: httpx.AsyncClient, base_url: str, body: dict[str, Any], result: LoadResult
) -> None:
    usage = timings = None
    started = False
    async with client.stream("POST", base_url + "/v1/chat/completions", json=body) as resp:
        if resp.status_code != 200:
            result.errors.append(f"HTTP {resp.status_code}")
            return
        try:
            # httpx-sse splits lines as SSE does (CR, LF): httpx's aiter_lines() also splits
            # at U+2028, U+0085 and the like, which a random model's tokens can hold, and
            # cut a JSON string in two (seen in CI)
            async for event in EventSource(resp).aiter_sse():
                if event.data == "[DONE]":
                    continue
                chunk = json.loads(event.data)
                if "error" in chunk:
                    result.errors.append(str(chunk["error"]))
                if chunk.get("usage"):
                    usage = chunk["usage"]
                if not started and any(
                    (c.get("delta") or {}).get("content") for c in chunk.get("choices") or ()
                ):
                    started = True  # the engine is generating this one now
                    result.mid_reply += 1
                # llama-server repeats its running timings; the last one covers the reply.
                timings = chunk.get("timings") or timings
        finally:
            result.mid_reply -= started
    if timings:
        result.predicted_n += int(timings["predicted_n"])
        result.predicted_ms += float(timings["predicted_ms"])
    if usage is None:
        result.errors.append("no usage chunk")
        return
    result.completion_tokens += int(usage["completion_tokens"])
    result.streams_ok += 1


async def streamed_load(
    base_url: str,
    model: str,
    streams: int,
    max_tokens: int,
    result: LoadResult | None = None,
    **extra: Any,
) -> LoadResult:
    result = result if result is not None else LoadResult()
    body = {
        "model": model,
        "stream": True,
        "max_tokens": max_tokens,
        "stream_options": {"include_usage": True},
        "messages": [{"role": "user", "content": "Tell me a long story."}],
        **extra,
    }
    async with httpx.AsyncClient(timeout=120) as client:
        await asyncio.gather(*(_one_stream(client, base_url, body, result) for _ in range(streams)))
    return result


def server_counter(base_url: str, name: str, path: str = "/metrics") -> float:
    """A counter straight from the engine's page (summed over label sets): the reference."""
    text = httpx.get(base_url + path, timeout=10).text
    return sum(
        s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
        if s.name == name
    )


@dataclass
class Observed:
    samples: list[EngineMetrics]
    load: LoadResult
    elapsed_s: float
    # sparkdeck's readings (a sampler of their own) taken while two streams were mid-reply
    in_flight: list[EngineMetrics] = field(default_factory=list)

    def answered(self) -> list[EngineMetrics]:
        """The readings the engine answered. On a loaded machine a scrape can miss its
        deadline (vLLM's API server shares two cores with its engine); that reading says
        so, and the next answer's rate spans back to the last answer, so no token is lost
        from the rates: they are accounted over the answered readings."""
        missed = [m for m in self.samples if not m.ok]
        assert all(m.reason for m in missed), missed
        assert len(missed) <= max(2, len(self.samples) // 10), missed
        return [m for m in self.samples if m.ok]

    def integrated_tokens(self) -> float:
        """Σ tok/s × interval over the answered readings: the tokens sparkdeck's rates
        account for."""
        answered = self.answered()
        return sum(
            (after.generation_tps or 0.0) * (after.wall - before.wall)
            for before, after in itertools.pairwise(answered)
        )

    def rates_over_window(self, counted: float) -> tuple[float, float]:
        """(sparkdeck's mean tok/s, the server's) over the sampled window; printed with -s."""
        answered = self.answered()
        span = answered[-1].wall - answered[0].wall
        ours, theirs = self.integrated_tokens() / span, counted / span
        print(
            f"\n{answered[-1].kind}: {counted:.0f} tokens in {span:.2f} s; sparkdeck "
            f"{ours:.1f} tok/s, server {theirs:.1f} tok/s "
            f"({(ours - theirs) / theirs * 100:+.3f} %); peak running "
            f"{self.peak('running'):g}, waiting {self.peak('waiting'):g}; "
            f"{len(self.samples) - len(answered)} of {len(self.samples)} readings missed"
        )
        return ours, theirs

    def peak(self, attribute: str) -> float:
        return max(getattr(m, attribute) or 0.0 for m in self.samples + self.in_flight)


async def observe_load(
    plan: MetricsPlan,
    base_url: str,
    model: str,
    streams: int,
    max_tokens: int,
    period_s: float = 0.25,
    settle_s: float = 60.0,
    **extra: Any,
) -> Observed:
    """Sample from idle, through the load, until the engine reports idle again."""
    reader = MetricsReader()
    sampler = MetricsSampler(plan, reader)
    samples: list[EngineMetrics] = []
    in_flight: list[EngineMetrics] = []
    load = LoadResult()
    stop = asyncio.Event()

    async def loop() -> None:
        while not stop.is_set():
            samples.append(await sampler.sample())
            await asyncio.sleep(period_s)

    async def probe() -> None:
        # On a loaded machine the periodic readings can all miss the moments when the
        # engine runs its full batch; these are taken exactly then (their own history, so
        # the rates above are untouched), from the first token on until a stream ends.
        prober = MetricsSampler(plan, reader)
        while not stop.is_set():
            if load.mid_reply >= 2:
                reading = await prober.sample()
                if reading.ok:
                    in_flight.append(reading)
            else:
                await asyncio.sleep(0.005)

    task = asyncio.create_task(loop())
    probing = asyncio.create_task(probe())
    try:
        while len(samples) < 3:
            await asyncio.sleep(0.05)
        started = time.monotonic()
        await streamed_load(base_url, model, streams, max_tokens, load, **extra)
        deadline = time.monotonic() + settle_s
        # Idle twice in a row after the load: counters that move at request end have moved.
        while time.monotonic() < deadline:
            await asyncio.sleep(period_s)
            tail = samples[-2:]
            if (
                len(tail) == 2
                and all(m.ok and m.running == 0 and m.waiting == 0 for m in tail)
                and tail[0].wall > started
            ):
                break
        stop.set()
        await task
        await probing
    finally:
        stop.set()
        await reader.aclose()
    return Observed(samples, load, time.monotonic() - started, in_flight)
