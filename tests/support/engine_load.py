"""Concurrent streamed chat requests against a real engine, and sparkdeck sampling it.

Shared by the llama-server and vLLM metrics tests: both prove that sparkdeck's numbers
agree with what the engine itself counted under the same load.
"""

from __future__ import annotations

import asyncio
import json
import time
from dataclasses import dataclass, field
from typing import Any

import httpx
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


async def _one_stream(client: httpx.AsyncClient, base_url: str, body: dict[str, Any],
                      result: LoadResult) -> None:
    usage = timings = None
    async with client.stream("POST", base_url + "/v1/chat/completions", json=body) as resp:
        if resp.status_code != 200:
            result.errors.append(f"HTTP {resp.status_code}")
            return
        async for line in resp.aiter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            chunk = json.loads(line[6:])
            if "error" in chunk:
                result.errors.append(str(chunk["error"]))
            if chunk.get("usage"):
                usage = chunk["usage"]
            # llama-server repeats its running timings; the last one covers the reply.
            timings = chunk.get("timings") or timings
    if timings:
        result.predicted_n += int(timings["predicted_n"])
        result.predicted_ms += float(timings["predicted_ms"])
    if usage is None:
        result.errors.append("no usage chunk")
        return
    result.completion_tokens += int(usage["completion_tokens"])
    result.streams_ok += 1


async def streamed_load(base_url: str, model: str, streams: int, max_tokens: int,
                        **extra: Any) -> LoadResult:
    result = LoadResult()
    body = {"model": model, "stream": True, "max_tokens": max_tokens,
            "stream_options": {"include_usage": True},
            "messages": [{"role": "user", "content": "Tell me a long story."}], **extra}
    async with httpx.AsyncClient(timeout=120) as client:
        await asyncio.gather(*(_one_stream(client, base_url, body, result)
                               for _ in range(streams)))
    return result


def server_counter(base_url: str, name: str, path: str = "/metrics") -> float:
    """A counter straight from the engine's page (summed over label sets): the reference."""
    text = httpx.get(base_url + path, timeout=10).text
    return sum(s.value for family in text_string_to_metric_families(text)
               for s in family.samples if s.name == name)


@dataclass
class Observed:
    samples: list[EngineMetrics]
    load: LoadResult
    elapsed_s: float

    def integrated_tokens(self) -> float:
        """Σ tok/s × interval over the samples: the tokens sparkdeck's rates account for."""
        total = 0.0
        for before, after in zip(self.samples, self.samples[1:]):
            assert after.ok, after
            total += (after.generation_tps or 0.0) * (after.wall - before.wall)
        return total

    def rates_over_window(self, counted: float) -> tuple[float, float]:
        """(sparkdeck's mean tok/s, the server's) over the sampled window; printed with -s."""
        span = self.samples[-1].wall - self.samples[0].wall
        ours, theirs = self.integrated_tokens() / span, counted / span
        print(f"\n{self.samples[-1].kind}: {counted:.0f} tokens in {span:.2f} s; sparkdeck "
              f"{ours:.1f} tok/s, server {theirs:.1f} tok/s "
              f"({(ours - theirs) / theirs * 100:+.3f} %); peak running "
              f"{self.peak('running'):g}, waiting {self.peak('waiting'):g}")
        return ours, theirs

    def peak(self, attribute: str) -> float:
        return max(getattr(m, attribute) or 0.0 for m in self.samples)


async def observe_load(plan: MetricsPlan, base_url: str, model: str, streams: int,
                       max_tokens: int, period_s: float = 0.25, settle_s: float = 60.0,
                       **extra: Any) -> Observed:
    """Sample from idle, through the load, until the engine reports idle again."""
    reader = MetricsReader()
    sampler = MetricsSampler(plan, reader)
    samples: list[EngineMetrics] = []
    stop = asyncio.Event()

    async def loop() -> None:
        while not stop.is_set():
            samples.append(await sampler.sample())
            await asyncio.sleep(period_s)

    task = asyncio.create_task(loop())
    try:
        while len(samples) < 3:
            await asyncio.sleep(0.05)
        started = time.monotonic()
        load = await streamed_load(base_url, model, streams, max_tokens, **extra)
        deadline = time.monotonic() + settle_s
        # Idle twice in a row after the load: counters that move at request end have moved.
        while time.monotonic() < deadline:
            await asyncio.sleep(period_s)
            tail = samples[-2:]
            if len(tail) == 2 and all(m.ok and m.running == 0 and m.waiting == 0
                                      for m in tail) and tail[0].wall > started:
                break
        stop.set()
        await task
    finally:
        stop.set()
        await reader.aclose()
    return Observed(samples, load, time.monotonic() - started)
