"""The benchmark run: size the prompt, warm up, sweep the concurrency levels, watch memory.

Each level sends `concurrency` streamed chat requests together, `runs` times; every request
has its own word order (no shared prefix) unless a context depth with prefix caching on is
asked for, in which case all requests share one context that a priming request cached first.
The runner is plain threads and callbacks: the CLI prints progress from them and the TUI
turns them into messages; storing is the caller's business (see sparkdeck.bench.store).
"""

from __future__ import annotations

import os
import random
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

import httpx

from sparkdeck.bench.outcome import BenchConfig, BenchOutcome, BenchProgress, now_iso
from sparkdeck.bench.prompt import PromptError, PromptPlan, make_counter, plan_prompt
from sparkdeck.bench.sampler import ResourceSampler
from sparkdeck.bench.server_side import HistogramTotals, read_totals, window
from sparkdeck.bench.stats import (
    PointSummary,
    RequestFigures,
    RoundFigures,
    refuses_context,
    request_figures,
    summarise_point,
)
from sparkdeck.bench.verdict import check_counts, judge
from sparkdeck.chat.client import ChatClient, ChatRequest, ChatStream, Timed
from sparkdeck.chat.errors import ChatError
from sparkdeck.engines import EngineKind
from sparkdeck.http_limits import capped_client

# When a request really left. Reading the clock before calling the client also counts the
# client's own work (encoding a long prompt as JSON, taking a pooled connection), which on a
# busy machine is milliseconds. httpcore reports `send_request_headers.started` through its
# trace extension just before the first byte is written to the socket; this transport turns
# that on for every request and keeps the time per thread, since each benchmark request runs
# in a thread of its own.
_SENT_EVENTS = ("http11.send_request_headers.started", "http2.send_request_headers.started")


class SendClockTransport(httpx.HTTPTransport):
    """An HTTPTransport that records, per thread, when the last request started sending."""

    def __init__(self, **kwargs: Any):
        super().__init__(**kwargs)
        self._local = threading.local()

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        local = self._local

        def trace(name: str, info: Any) -> None:
            if name in _SENT_EVENTS:
                local.sent_at = time.perf_counter()

        request.extensions["trace"] = trace
        return super().handle_request(request)

    def reset(self) -> None:
        self._local.sent_at = None

    def sent_at(self) -> float | None:
        """The send time of this thread's latest request since `reset()`, if it got that far."""
        return getattr(self._local, "sent_at", None)


def _load_average() -> float:
    try:
        return os.getloadavg()[0]
    except OSError:
        return 0.0


@dataclass
class _Live:
    """State shared between the run thread, request threads, sampler and a canceller."""

    stop: threading.Event = field(default_factory=threading.Event)
    reason: str | None = None
    streams: set[ChatStream] = field(default_factory=set)
    lock: threading.Lock = field(default_factory=threading.Lock)


class BenchRunner:
    """Runs one benchmark against an OpenAI-compatible server at `base_url`."""

    def __init__(
        self,
        base_url: str,
        kind: EngineKind,
        config: BenchConfig,
        *,
        api_key: str | None = None,
        on_progress: Callable[[BenchProgress], object] | None = None,
        on_point: Callable[[PointSummary, list[RoundFigures]], None] | None = None,
        sampler: ResourceSampler | None = None,
    ):
        self.base_url, self.kind, self.config = base_url.rstrip("/"), kind, config
        self.api_key = api_key
        self.on_progress = on_progress or (lambda p: None)
        self.on_point = on_point or (lambda p, r: None)
        self._live = _Live()
        self.sampler = sampler or ResourceSampler(config.sampler_hz)
        self._nonce = random.SystemRandom().randrange(1 << 30)
        self._send_clock = SendClockTransport()
        self._load = _load_average()  # the host's highest 1-min load average seen in the run
        self._metrics_http: httpx.Client | None = None  # for the server's own histograms

    def cancel(self, reason: str) -> None:
        """Stop the run from any thread: in-flight replies are aborted, the reason recorded."""
        live = self._live
        with live.lock:
            if live.reason is None:
                live.reason = reason
            live.stop.set()
            streams = list(live.streams)
        for stream in streams:
            stream.cancel()

    def _seed(self, *parts: int) -> int:
        return hash((self._nonce, *parts)) & 0x7FFFFFFF

    def _request(self, plan: PromptPlan, model: str, seed: int, context_seed: int) -> ChatRequest:
        cfg = self.config
        return ChatRequest(
            plan.messages(seed, context_seed),
            model=model,
            max_tokens=cfg.output_tokens,
            temperature=0.0,
            extra=self.kind.exact_length_fields(cfg.output_tokens),
        )

    def _one(
        self,
        client: ChatClient,
        request: ChatRequest,
        plan: PromptPlan,
        start: threading.Barrier | None,
    ) -> RequestFigures:
        stream = client.stream(request)
        with self._live.lock:
            self._live.streams.add(stream)
        events: list[Timed] = []
        error: str | None = None
        if start is not None:
            try:
                start.wait()
            except threading.BrokenBarrierError:
                pass  # a sibling never came: send anyway, the round is still measured
        self._send_clock.reset()
        try:
            with stream:
                for timed in stream:
                    events.append(timed)
        except ChatError as exc:
            error = str(exc)
        except Exception as exc:  # noqa: BLE001 - any failure is this request's record
            error = f"{type(exc).__name__}: {exc}"
        finally:
            with self._live.lock:
                self._live.streams.discard(stream)
        done_at = time.perf_counter()
        # the socket write if it happened, else the moment the stream was asked for
        sent_at = self._send_clock.sent_at() or stream.started_at or done_at
        if stream.cancelled and error is None:
            error = f"stopped: {self._live.reason}"
        return request_figures(
            sent_at,
            events,
            done_at,
            prompt_fallback=plan.total_tokens,
            prompt_fallback_source=plan.counted_by,
            error=error,
        )

    def _round(
        self, client: ChatClient, plan: PromptPlan, model: str, level: int, repeat: int
    ) -> RoundFigures:
        shared = self._seed(0, 0, 0) if self.config.prefix_cache else None
        results: list[RequestFigures | None] = [None] * level
        barrier = threading.Barrier(level, timeout=30.0) if level > 1 else None

        def work(i: int) -> None:
            seed = self._seed(level, repeat, i)
            request = self._request(plan, model, seed, shared if shared is not None else seed)
            results[i] = self._one(client, request, plan, barrier)

        threads = [
            threading.Thread(target=work, args=(i,), name=f"bench-{level}-{i}")
            for i in range(level)
        ]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        self._load = max(self._load, _load_average())
        return RoundFigures(level, repeat, tuple(r for r in results if r is not None))

    def run(self) -> BenchOutcome:
        cfg, started = self.config, now_iso()
        warnings: list[str] = []
        points: list[PointSummary] = []
        rounds: list[RoundFigures] = []
        plan: PromptPlan | None = None
        model = cfg.model or ""
        self.sampler.start()
        try:
            with ChatClient(
                self.base_url, api_key=self.api_key, transport=self._send_clock
            ) as client:
                model = cfg.model or client.default_model()
                self.on_progress(BenchProgress("sizing"))
                plan = self._plan(model)
                if abs(plan.total_tokens - cfg.depth_tokens - cfg.prompt_tokens) > 1:
                    warnings.append(
                        f"the prompt comes to {plan.total_tokens} tokens, the "
                        f"closest to {cfg.depth_tokens + cfg.prompt_tokens} this "
                        "tokenizer allows"
                    )
                total = sum(cfg.concurrency) * cfg.runs
                done = 0
                # a shared context must be in the cache before anything is measured
                primes = 1 if cfg.prefix_cache and cfg.depth_tokens else 0
                for i in range(max(cfg.warmup, primes)):
                    if self._live.stop.is_set():
                        break
                    self.on_progress(BenchProgress("warmup", 1, i, 0, total))
                    self._round(client, plan, model, 1, -1 - i)
                for level in cfg.concurrency:
                    level_rounds: list[RoundFigures] = []
                    server_before = self._server_totals()
                    for repeat in range(cfg.runs):
                        if self._live.stop.is_set():
                            break
                        self.on_progress(BenchProgress("measuring", level, repeat, done, total))
                        level_rounds.append(self._round(client, plan, model, level, repeat))
                        done += level
                    if level_rounds:
                        server = window(server_before, self._server_totals())
                        point = summarise_point(level, level_rounds)
                        if server is not None:
                            point = replace(
                                point,
                                server_ttft_s=server.ttft_s,
                                server_stream_decode_tps=server.stream_decode_tps,
                            )
                        points.append(point)
                        rounds.extend(level_rounds)
                        self.on_point(point, level_rounds)
                        if refuses_context(point):  # more at once only fails the same way
                            break
                    if self._live.stop.is_set():
                        break
                self.on_progress(BenchProgress("done", None, None, done, total))
        except (ChatError, PromptError, httpx.HTTPError, ValueError) as exc:
            self._live.reason = self._live.reason or str(exc)
            return self._outcome(model, "failed", plan, points, rounds, warnings, started)
        except BaseException:
            self.sampler.stop()  # a bug: no sampler thread left behind, and the traceback
            raise
        warnings += check_counts(cfg, plan, rounds)
        status, reason = judge(cfg, points, rounds, self._live.stop.is_set(), self._load)
        self._live.reason = reason or self._live.reason
        return self._outcome(model, status, plan, points, rounds, warnings, started)

    def _server_totals(self) -> HistogramTotals | None:
        """The engine's latency histograms now, where its kind has them (else None)."""
        mapping, path = self.kind.metrics_map, self.kind.metrics_path
        if mapping is None or not path or not (mapping.itl_histogram or mapping.ttft_histogram):
            return None
        if self._metrics_http is None:
            self._metrics_http = capped_client(
                headers=({"Authorization": f"Bearer {self.api_key}"} if self.api_key else {})
            )
        return read_totals(self._metrics_http, self.base_url + path, mapping)

    def _plan(self, model: str) -> PromptPlan:
        with capped_client(
            timeout=60.0,
            headers=({"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}),
        ) as http:
            counter, counted_by = make_counter(self.kind, http, self.base_url, model)
            return plan_prompt(
                counter, counted_by, self.config.prompt_tokens, self.config.depth_tokens
            )

    def _outcome(
        self,
        model: str,
        status: str,
        plan: PromptPlan | None,
        points: list[PointSummary],
        rounds: list[RoundFigures],
        warnings: list[str],
        started: str,
    ) -> BenchOutcome:
        peaks = self.sampler.stop()
        if self._metrics_http is not None:
            self._metrics_http.close()
            self._metrics_http = None
        return BenchOutcome(
            self.config,
            model,
            status,
            self._live.reason,
            plan,
            tuple(points),
            tuple(rounds),
            peaks,
            tuple(warnings),
            started,
            now_iso(),
        )
