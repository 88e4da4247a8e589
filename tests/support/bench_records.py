"""Bench runs written by hand into a real BenchStore: a launch's fingerprint, rounds of
request figures and a run's outcome.
"""

from __future__ import annotations

from sparkdeck.bench.prompt import PromptPlan
from sparkdeck.bench.runner import BenchConfig, BenchOutcome
from sparkdeck.bench.sampler import ResourcePeaks
from sparkdeck.bench.stats import RequestFigures, RoundFigures, summarise_point
from sparkdeck.bench.store import BenchStore
from sparkdeck.bench.target import LaunchFingerprint

CONFIG = BenchConfig(prompt_tokens=100, output_tokens=11, concurrency=(1, 2), runs=1)


def fp(
    preset: str | None, version: str = "b1", url: str = "http://127.0.0.1:8080", model: str = "tiny"
) -> LaunchFingerprint:
    return LaunchFingerprint(
        url=url,
        kind="llamacpp",
        model=model,
        engine_version=version,
        source="managed" if preset else "flag",
        preset_id=preset,
        image="img:1",
        image_id="sha256:abc",
        argv=("llama-server", "-c"),
    )


def rounds(level: int, decode_s: float) -> list[RoundFigures]:
    reqs = tuple(
        RequestFigures(
            True, None, 0.0, 0.1, 0.1 + decode_s, 0.2 + decode_s, 100, "usage", 11, "usage"
        )
        for _ in range(level)
    )
    return [RoundFigures(level, 0, reqs)]


def outcome(status: str = "complete", reason: str | None = None) -> BenchOutcome:
    return BenchOutcome(
        CONFIG,
        "tiny",
        status,
        reason,
        PromptPlan(0, 90, 0, 100, "usage"),
        (),
        (),
        ResourcePeaks(samples=3, peak_used_bytes=5, min_available_bytes=7),
        ("a warning",),
        "2026-01-01T00:00:00+00:00",
        "2026-01-01T00:01:00+00:00",
    )


def store_run(
    store: BenchStore,
    launch: LaunchFingerprint,
    decode_s: float,
    levels: tuple[int, ...] = (1, 2),
    status: str = "complete",
) -> int:
    run_id = store.begin_run(launch, CONFIG, "2026-01-01T00:00:00+00:00")
    for level in levels:
        r = rounds(level, decode_s)
        store.add_point(run_id, summarise_point(level, r), r)
    store.finish_run(run_id, outcome(status, None if status == "complete" else "memory low"))
    return run_id
