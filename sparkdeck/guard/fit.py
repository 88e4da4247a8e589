"""The fit check before a launch: will the claim fit in what is available now?

Two figures matter on a Spark (DESIGN.md, "Memory on a Spark"). MemAvailable counts the page
cache as free, and vLLM's own start-up check compares it with share x total; but CUDA
allocations effectively see MemFree and can fail, or stall the host, until the cache is
dropped. So a claim that fits MemFree fits; one that fits only MemAvailable fits after
flushing the page cache (which drops the cache and reclaimable slab, roughly the gap between
the two); one that exceeds MemAvailable does not fit. A headroom of the watchdog's stop
threshold is kept on top: a launch that leaves less would be stopped by the guard anyway.
"""

from __future__ import annotations

from dataclasses import dataclass

from sparkdeck.guard.claims import GIB, MemoryClaim
from sparkdeck.host.meminfo import MemorySnapshot

FITS = "fits"
FITS_AFTER_FLUSH = "fits after flushing the page cache"
DOES_NOT_FIT = "does not fit"
UNKNOWN = "cannot be checked"


def _gib(n: int) -> str:
    return f"{n / GIB:.1f} GiB"


@dataclass(frozen=True)
class FitCheck:
    """The verdict and every number it was reached from."""

    verdict: str
    claim: MemoryClaim
    memory: MemorySnapshot
    headroom: int  # kept free on top of the claim (the watchdog's stop threshold)
    returning: int  # expected back from the engine the launch stops first
    flush_possible: bool
    reason: str
    # where `returning` came from, one line per engine ("vllm holds 23.1 GiB (container
    # cgroup)"): the engine's own memory, never another process's
    returning_from: tuple[str, ...] = ()

    @property
    def allowed(self) -> bool:
        """True when a launch may go ahead without --force. An unknown claim is allowed
        (sparkdeck cannot refuse what it cannot size) but says so."""
        return self.verdict != DOES_NOT_FIT

    def lines(self) -> list[str]:
        """The numbers, one per line, for the CLI refusal and the TUI modal."""
        m = self.memory
        out = [
            f"claim:          {self.claim.describe()}",
            f"headroom kept:  {_gib(self.headroom)} (the watchdog's stop threshold)",
            f"MemAvailable:   {_gib(m.available)}",
            f"MemFree:        {_gib(m.free)}",
            f"page cache:     {_gib(m.page_cache)}",
        ]
        if self.returning or self.returning_from:
            out.append(f"coming back:    {_gib(self.returning)} from the engine stopped first")
            out.extend(f"                {source}" for source in self.returning_from)
        out.append(f"verdict:        {self.verdict}: {self.reason}")
        return out

    def to_dict(self) -> dict[str, object]:
        m = self.memory
        return {
            "verdict": self.verdict,
            "allowed": self.allowed,
            "reason": self.reason,
            "claim": self.claim.to_dict(),
            "headroom": self.headroom,
            "returning": self.returning,
            "returning_from": list(self.returning_from),
            "flush_possible": self.flush_possible,
            "available": m.available,
            "free": m.free,
            "page_cache": m.page_cache,
            "total": m.total,
        }


def check_fit(
    claim: MemoryClaim,
    memory: MemorySnapshot,
    *,
    headroom: int,
    returning: int = 0,
    flush_possible: bool = True,
    returning_from: tuple[str, ...] = (),
) -> FitCheck:
    """Decide whether `claim` fits, counting memory the stopped engine will give back."""
    args = (claim, memory, headroom, returning, flush_possible)
    verdict = _verdict(claim, memory, headroom, returning, flush_possible)
    return FitCheck(verdict[0], *args, reason=verdict[1], returning_from=returning_from)


def _verdict(
    claim: MemoryClaim, memory: MemorySnapshot, headroom: int, returning: int, flush_possible: bool
) -> tuple[str, str]:
    if claim.bytes is None:
        return UNKNOWN, claim.basis
    need = claim.bytes + headroom
    available = memory.available + returning
    free = memory.free + returning
    if need > available:
        return (
            DOES_NOT_FIT,
            (f"needs {_gib(need)} with headroom, only {_gib(available)} is available"),
        )
    if need <= free:
        return (FITS, f"needs {_gib(need)}, {_gib(free)} is free")
    if flush_possible:
        return (
            FITS_AFTER_FLUSH,
            (
                f"needs {_gib(need)}: more than the {_gib(free)} free, within the "
                f"{_gib(available)} available once the page cache is dropped"
            ),
        )
    return (
        DOES_NOT_FIT,
        (
            f"needs {_gib(need)}, only {_gib(free)} is free; it would fit after flushing the page "
            "cache, which is not done here (--no-flush, or no permission)"
        ),
    )
