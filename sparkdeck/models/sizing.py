"""Right-sized memory: weights + KV cache + the engine's overhead, from a model's facts.

Pure arithmetic on ModelFacts and what a preset asks for (tokens per sequence, sequences or
a KV budget, KV dtype). Each engine kind turns the plan into its own knob (sparkdeck.engines);
the guard's fit check takes the plan's total as the claim. Nothing here reads a file.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sparkdeck.guard.claims import GIB, MemoryClaim
from sparkdeck.models.facts import ModelFacts

# vLLM refuses to start when the free memory it sees is below utilization x total; sparkdeck
# keeps this much of MemAvailable out of what it lets the start-up ask for, so that check
# never fails because the page cache or a shell took a little in the meantime.
STARTUP_RESERVE = 2 * GIB


class PlanUnavailable(ValueError):
    """The preset asks for a computed plan but it cannot be made (the reason says why)."""


@dataclass(frozen=True)
class MemoryPlan:
    """What an engine will hold, in parts, and the KV capacity that buys."""

    kind: str
    model_source: str  # the file or directory the facts came from
    weights: int  # bytes, as stored on disk (read from the files)
    kv: int  # bytes for the KV cache
    overhead: int  # the engine's own: activations, CUDA graphs, runtime (an estimate)
    overhead_why: str
    context: int | None  # tokens per sequence (None: the model's own limit)
    sequences: int  # sequences of `context` tokens the KV cache holds at once
    kv_tokens: int  # tokens of KV the cache holds in all (full-attention layers)
    kv_dtype: str
    kv_bytes_per_token: float  # of full-attention layers, for kv_dtype

    @property
    def total(self) -> int:
        return self.weights + self.kv + self.overhead

    def claim(self) -> MemoryClaim:
        """The fit check's claim: exact where computed from files (weights and KV), with the
        overhead as the one estimated part, named in the note."""
        basis = (
            f"weights {_gib(self.weights)} + KV {_gib(self.kv)} + overhead "
            f"{_gib(self.overhead)}, computed from {self.model_source}"
        )
        return MemoryClaim(
            self.total,
            basis,
            estimated=False,
            note=f"weights and KV exact from the files; overhead estimated ({self.overhead_why})",
        )

    def lines(self) -> list[str]:
        ctx = f"{self.context:,} tokens" if self.context else "the model's own limit"
        return [
            f"model files:   {self.model_source}",
            f"weights:       {_gib(self.weights)} (exact, from the files)",
            f"KV cache:      {_gib(self.kv)} (exact: {self.kv_bytes_per_token / 1024:.1f} KiB "
            f"per token at {self.kv_dtype}, {self.kv_tokens:,} tokens)",
            f"  context:     {ctx} x {self.sequences} sequence(s)",
            f"overhead:      {_gib(self.overhead)} (estimate: {self.overhead_why})",
            f"total claim:   {_gib(self.total)}",
        ]

    def to_dict(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "model_source": self.model_source,
            "weights": self.weights,
            "kv": self.kv,
            "overhead": self.overhead,
            "overhead_why": self.overhead_why,
            "total": self.total,
            "context": self.context,
            "sequences": self.sequences,
            "kv_tokens": self.kv_tokens,
            "kv_dtype": self.kv_dtype,
            "kv_bytes_per_token": self.kv_bytes_per_token,
            "claim": self.claim().to_dict(),
        }


def _gib(n: float) -> str:
    return f"{n / GIB:.2f} GiB"


def plan_memory(
    facts: ModelFacts,
    *,
    kind: str,
    overhead: int,
    overhead_why: str,
    context: int | None,
    sequences: int | None = None,
    kv_budget: int | None = None,
    kv_dtype: str = "auto",
) -> MemoryPlan:
    """Size the KV cache from `context` x `sequences`, or take `kv_budget` bytes as it is.

    With a budget the capacity follows from it (tokens, and whole sequences of `context`
    when a context is given); without one, `context` is required.
    """
    per_token = facts.kv_bytes_per_token(kv_dtype)
    if kv_budget is not None:
        if kv_budget <= 0:
            raise PlanUnavailable("kv_budget_gib must be above 0")
        kv = int(kv_budget)
        tokens = facts.tokens_for(kv, kv_dtype)
        per_sequence = facts.kv_bytes(context, 1, kv_dtype) if context else 0
        seqs = int(kv // per_sequence) if per_sequence else 1
        if context and seqs < 1:
            raise PlanUnavailable(
                f"a KV budget of {_gib(kv)} does not hold one sequence of {context:,} tokens "
                f"({_gib(per_sequence)} at {kv_dtype})"
            )
    else:
        if not context:
            raise PlanUnavailable("state `context` (tokens per sequence) or `kv_budget_gib`")
        seqs = sequences or 1
        kv = facts.kv_bytes(context, seqs, kv_dtype)
        tokens = context * seqs
    return MemoryPlan(
        kind=kind,
        model_source=facts.source,
        weights=facts.weight_bytes,
        kv=kv,
        overhead=overhead,
        overhead_why=overhead_why,
        context=context,
        sequences=max(seqs, 1),
        kv_tokens=tokens,
        kv_dtype=kv_dtype,
        kv_bytes_per_token=per_token,
    )


def share_of(
    amount: int,
    total: int,
    *,
    ceiling: float,
    available: int | None = None,
    reserve: int = STARTUP_RESERVE,
) -> float:
    """`amount` as a share of `total`, rounded up to 3 places (an engine that gets a hair
    less than it was sized for would lose KV blocks), at most `ceiling` and, when the
    available memory is known, at most what it leaves after `reserve`."""
    if total <= 0:
        raise PlanUnavailable("the memory total is unknown")
    share = -(-amount * 1000 // total) / 1000
    if available is not None:  # rounded down: the cap is a limit, not a size
        share = min(share, max(available - reserve, 0) * 1000 // total / 1000)
    # Never 0 (engines refuse it): with nothing left the fit check has refused already.
    return max(min(share, ceiling), 0.001)
