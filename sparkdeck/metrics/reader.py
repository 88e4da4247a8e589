"""Scrape an engine's metrics endpoint over HTTP, once, and say exactly what came back.

One `MetricsReader` wraps one shared `httpx.AsyncClient` with short timeouts (a sampler asks
every second; a slow engine must not pile requests up). A scrape never raises for what an
engine or the network does: it returns a `RawSample` (parsed, checked series with the wall
and monotonic time of the read) or a typed outcome - `MetricsOff` (the engine answers but
its metrics are switched off; the hint says how to switch them on), `Unreachable` or
`InvalidSample` (the body was refused; the reason says why).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

import httpx

from sparkdeck.metrics.exposition import MAX_BODY_BYTES, Families, MalformedMetrics, parse_body

CONNECT_TIMEOUT_S = 0.5
READ_TIMEOUT_S = 0.8
# 404: SGLang without --enable-metrics has no such route; 501: llama-server without --metrics.
OFF_STATUSES = (404, 501)

Decoder = Callable[[bytes], Families]


@dataclass(frozen=True)
class MetricsTarget:
    """Where and how to read one engine's numbers (built by its EngineKind)."""

    url: str  # the full URL of the metrics (or status) endpoint
    kind: str
    decode: Decoder = parse_body
    off_hint: str = "this engine's metrics endpoint is switched off"


@dataclass(frozen=True)
class RawSample:
    """One successful scrape: the checked series and when they were read."""

    families: Families
    wall: float
    monotonic: float


@dataclass(frozen=True)
class MetricsOff:
    """The engine answered, but its metrics are switched off."""

    hint: str
    status_code: int
    wall: float
    monotonic: float


@dataclass(frozen=True)
class Unreachable:
    """Nothing usable came back over HTTP (refused, timed out, reset, 5xx)."""

    reason: str
    wall: float
    monotonic: float


@dataclass(frozen=True)
class InvalidSample:
    """A body came back but was refused; `reason` names the first problem found."""

    reason: str
    wall: float
    monotonic: float


ScrapeResult = RawSample | MetricsOff | Unreachable | InvalidSample


def decode_response(
    target: MetricsTarget, status: int, body: bytes, wall: float, monotonic: float
) -> ScrapeResult:
    """Turn one HTTP answer into a scrape result. Pure: tests drive it with hostile bodies."""
    if status in OFF_STATUSES:
        return MetricsOff(target.off_hint, status, wall, monotonic)
    if status != 200:
        return Unreachable(f"HTTP {status} from {target.url}", wall, monotonic)
    try:
        families = target.decode(body)
    except MalformedMetrics as exc:
        return InvalidSample(str(exc), wall, monotonic)
    # A decoder is engine code reading engine output: whatever it trips on, the sample is
    # invalid, never an exception in a sampler loop.
    except Exception as exc:  # noqa: BLE001
        return InvalidSample(
            f"could not be decoded: {type(exc).__name__}: {exc}"[:240], wall, monotonic
        )
    return RawSample(families, wall, monotonic)


class MetricsReader:
    """Scrapes metrics endpoints through one shared async HTTP client."""

    def __init__(self, client: httpx.AsyncClient | None = None) -> None:
        self._own_client = client is None
        self.client = client or httpx.AsyncClient(
            timeout=httpx.Timeout(READ_TIMEOUT_S, connect=CONNECT_TIMEOUT_S),
            # Engines are on loopback or the LAN: proxies from the environment do not apply.
            trust_env=False,
            limits=httpx.Limits(max_connections=8, max_keepalive_connections=4),
        )

    async def scrape(self, target: MetricsTarget) -> ScrapeResult:
        wall, mono = time.time(), time.monotonic()
        try:
            async with self.client.stream("GET", target.url) as response:
                # An engine builds its page from its counters and sends it at once; a busy
                # one is slow before it answers (vLLM's loop up to 9 s), not while sending.
                # So the counters were read when the answer arrived: rates are taken over
                # that moment, never over when the request left (nor the midpoint, which put
                # half of a slow answer's wait into the wrong step).
                wall, mono = time.time(), time.monotonic()
                body = bytearray()
                async for chunk in response.aiter_bytes():
                    body += chunk
                    if len(body) > MAX_BODY_BYTES:
                        return InvalidSample(
                            f"body is larger than {MAX_BODY_BYTES} bytes", wall, mono
                        )
                status = response.status_code
        except httpx.HTTPError as exc:
            return Unreachable(f"{type(exc).__name__}: {exc}".rstrip(": ")[:240], wall, mono)
        return decode_response(target, status, bytes(body), wall, mono)

    async def aclose(self) -> None:
        if self._own_client:
            await self.client.aclose()
