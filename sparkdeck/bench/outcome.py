"""What a benchmark run is asked (BenchConfig), where it stands while it runs
(BenchProgress), and what it gives back (BenchOutcome): the values the runner, the store,
the CLI and the bench view share.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from typing import Any

from sparkdeck.bench.prompt import PromptPlan
from sparkdeck.bench.sampler import ResourcePeaks
from sparkdeck.bench.stats import PointSummary, RoundFigures

DEFAULT_CONCURRENCY = (1, 2, 4, 8)


@dataclass(frozen=True)
class BenchConfig:
    """What to measure. Token counts are as the server counts them (chat template included)."""

    prompt_tokens: int = 512
    output_tokens: int = 128
    concurrency: tuple[int, ...] = DEFAULT_CONCURRENCY
    runs: int = 3
    warmup: int = 1
    depth_tokens: int = 0
    prefix_cache: bool = False
    model: str | None = None
    sampler_hz: float = 4.0

    def __post_init__(self) -> None:
        if self.prompt_tokens < 1 or self.output_tokens < 2:
            raise ValueError(
                "prompt tokens must be >= 1 and output tokens >= 2 (decode speed needs two tokens)"
            )
        if not self.concurrency or min(self.concurrency) < 1 or self.runs < 1 or self.warmup < 0:
            raise ValueError("concurrency levels and runs must be >= 1, warm-up >= 0")

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "concurrency": list(self.concurrency)}


@dataclass(frozen=True)
class BenchProgress:
    """Where a run stands; `phase` is sizing, warmup, measuring or done."""

    phase: str
    concurrency: int | None = None
    repeat: int | None = None
    requests_done: int = 0
    requests_total: int = 0


@dataclass(frozen=True)
class BenchOutcome:
    """A whole run. `status`: complete, errors (some requests failed: `reason` gives each
    level's count and the engine's message), unreliable (measured to the end, but the
    client's timing cannot be trusted; `reason` says why), stopped (watchdog or user;
    `reason` says which) or failed (no request succeeded; `reason` holds the first error)."""

    config: BenchConfig
    model: str
    status: str
    reason: str | None
    plan: PromptPlan | None
    points: tuple[PointSummary, ...]
    rounds: tuple[RoundFigures, ...]
    peaks: ResourcePeaks
    warnings: tuple[str, ...]
    started_at: str
    finished_at: str


def now_iso() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")
