"""What a finished benchmark run's figures are worth: its status and the reason for it, and
warnings where the server's counts disagree with what the run asked for (pure logic on the
run's figures; the runner in runner.py measures them).

The statuses, in the order they are decided: errors (some requests failed, and others did
not), unreliable (measured to the end, but the client's timing cannot be trusted: the
server fell behind its clients), stopped (the watchdog or the user), failed (no request
succeeded), complete.
"""

from __future__ import annotations

import os

from sparkdeck.bench.outcome import BenchConfig
from sparkdeck.bench.prompt import PromptPlan
from sparkdeck.bench.server_side import burst_reason
from sparkdeck.bench.stats import (
    PointSummary,
    RoundFigures,
    errors_reason,
    fell_behind,
    summarise,
)


def judge(
    config: BenchConfig,
    points: list[PointSummary],
    rounds: list[RoundFigures],
    stopped: bool,
    load: float,
) -> tuple[str, str | None]:
    """(status, reason) of a run that measured to its end or was stopped; the reason is
    None where the run's own (a stop's) stands. `load`: the host's highest 1-minute load
    average seen in the run."""
    answered = any(r.ok for rnd in rounds for r in rnd.requests)
    failed = errors_reason(points, config.concurrency) if not stopped else None
    if failed and answered:
        # any failed request makes the run not complete; said before a timing caveat,
        # which would otherwise hide it (the 12/12 errors read "unreliable")
        return "errors", failed
    behind = fell_behind(rounds) + [
        reason
        for point in points
        if (
            reason := burst_reason(
                point.concurrency,
                [r for rnd in rounds if rnd.concurrency == point.concurrency for r in rnd.requests],
                point.server_stream_decode_tps,
            )
        )
    ]
    if behind and not stopped:
        cores = os.cpu_count() or 1
        busy = f" (load average up to {load:.1f} on {cores} cores)" if load > cores else ""
        return "unreliable", "; ".join(behind) + busy
    if stopped:
        return "stopped", None
    if not answered:
        first = next((r.error for rnd in rounds for r in rnd.requests if r.error), None)
        return "failed", f"no request succeeded: {first}"
    return "complete", None


def check_counts(
    config: BenchConfig, plan: PromptPlan | None, rounds: list[RoundFigures]
) -> list[str]:
    """Warnings where the server's counts disagree with what the run asked for."""
    ok = [r for rnd in rounds for r in rnd.requests if r.ok]
    found: list[str] = []
    if plan is not None:
        off = sorted(
            {
                r.prompt_tokens
                for r in ok
                if r.prompt_source == "usage"
                and r.prompt_tokens is not None
                and r.prompt_tokens != plan.total_tokens
            }
        )
        if off:
            found.append(
                f"the server counted {', '.join(map(str, off[:5]))} prompt tokens "
                f"where the prompt was sized to {plan.total_tokens}"
            )
        if plan.counted_by == "estimate":
            found.append(
                "the server counts no tokens (no tokenizer endpoint, no usage): "
                "prompt sizes are estimates"
            )
    # A server that falls behind its clients (seen with vLLM on a starved CPU) sends most of
    # a reply in one burst: its decode rate then measures delivery, not decoding. One stream
    # alone decodes fastest, so a rate far above the single-stream median gives it away.
    alone = summarise(
        r.decode_tps for rnd in rounds if rnd.concurrency == 1 for r in rnd.requests if r.ok
    ).median
    bursts = [
        r
        for rnd in rounds
        if rnd.concurrency > 1
        for r in rnd.requests
        if r.ok and alone and r.decode_tps and r.decode_tps > 3 * alone
    ]
    if bursts:
        found.append(
            f"{len(bursts)} of {len(ok)} replies arrived in bursts (decode over 3x "
            "the single-stream rate): their decode rates say how fast text was "
            "delivered, not decoded; the total figures still hold"
        )
    short = [r for r in ok if (r.output_tokens or 0) < config.output_tokens]
    if short:
        reasons = ", ".join(sorted({r.finish_reason or "none given" for r in short}))
        fewest = min(r.output_tokens or 0 for r in short)
        found.append(
            f"{len(short)} repl{'y' if len(short) == 1 else 'ies'} ended before "
            f"{config.output_tokens} tokens (fewest {fewest}; finish reason: "
            f"{reasons}): an end-of-sequence the engine would not ignore, or its "
            "context ran out; decode figures use the real counts"
        )
    return found
