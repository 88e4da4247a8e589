"""Is the GPU being held back, and why: a verdict from one NVML snapshot.

Pure logic over `GpuSnapshot` (sparkdeck.host.nvml): no NVML calls here. Four kinds of
trouble are told apart, because each asks something different of the owner:

- **thermal**: SW or HW thermal slowdown. The box is too hot (airflow, dust, ambient).
- **power cap**: SW power cap or the HW power brake. The GPU wants more than its limit; on a
  datacenter GPU under a heavy matmul this is normal (the lent H200 sits at ~690 of 700 W with
  the SM clock near 1,450 of 1,980 MHz), but a benchmark taken meanwhile is not at full clocks.
- **hardware slowdown**: HW slowdown with neither of its specific children (HW thermal, HW
  power brake) named. NVML sets HW slowdown as the parent of both, so it is reported on its own
  only when it is the whole story (e.g. an external power-brake signal or a failing sensor).
- **clock stuck low**: the GPU is busy, its SM clock well under its maximum and NVML gives no
  reason at all. That is what a GB10 looks like when its firmware clamps clocks without saying
  why, and what a wedged clock governor looks like anywhere.

"idle", "applications clocks setting", "display clock setting" and "sync boost" are clock
events but not throttling: they explain a low clock without anything being wrong.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # types only: the TUI's glance strip loads this before NVML's reader
    from sparkdeck.host.nvml import GpuReading, GpuSnapshot

THERMAL = "thermal"
POWER_CAP = "power cap"
HARDWARE = "hardware slowdown"
STUCK_LOW = "clock stuck low"

KIND_ORDER = (THERMAL, POWER_CAP, HARDWARE, STUCK_LOW)  # most to least urgent

_REASON_KIND = {
    "SW thermal slowdown": THERMAL,
    "HW thermal slowdown": THERMAL,
    "SW power cap": POWER_CAP,
    "HW power brake slowdown": POWER_CAP,
}
_HW_SLOWDOWN = "HW slowdown"
# Reasons that explain a low clock by a setting or by having nothing to do.
_BENIGN = frozenset({"idle", "applications clocks setting", "display clock setting", "sync boost"})

# "Busy" and "well below max": a decode step keeps utilisation near 100 %; a boost clock
# under load is rarely below ~85 % of max unless something holds it (the H200 under its
# power cap ran at 73-90 %, with the cap named), so 70 % with no reason is a clamp.
BUSY_UTIL_PCT = 80
LOW_CLOCK_SHARE = 0.70


@dataclass(frozen=True)
class ThrottleVerdict:
    """One GPU's throttle state at one reading. `kinds` empty = not held back."""

    gpu_index: int
    kinds: tuple[str, ...]  # of KIND_ORDER, most urgent first
    reasons: tuple[str, ...]  # the NVML reasons behind them (empty for STUCK_LOW)
    sm_clock_mhz: int | None
    sm_clock_max_mhz: int | None
    utilisation_gpu: int | None
    reasons_known: bool  # False when NVML could not give clock-event reasons at all

    @property
    def throttled(self) -> bool:
        return bool(self.kinds)

    @property
    def clock_share(self) -> float | None:
        if not self.sm_clock_mhz or not self.sm_clock_max_mhz:
            return None
        return self.sm_clock_mhz / self.sm_clock_max_mhz

    @property
    def level(self) -> str:
        """How loudly a panel shows it: heat and hardware trouble louder than a power cap."""
        if THERMAL in self.kinds or HARDWARE in self.kinds:
            return "error"
        return "warning" if self.kinds else ""

    def short(self) -> str:
        """ "power cap · SM at 74 % of max": the kinds and the clock, for a panel row."""
        text = ", ".join(self.kinds) or "none"
        share = self.clock_share
        if share is None or not self.kinds:
            return text
        return f"{text} · SM at {share * 100:.0f} % of max"

    def describe(self) -> str:
        """ "power cap (SW power cap), SM 1440 of 1980 MHz (73 %)" or "not throttled"."""
        if not self.kinds:
            return "not throttled" if self.reasons_known else "no reasons from NVML"
        parts = []
        for kind in self.kinds:
            named = [r for r in self.reasons if _kind_of(r) == kind]
            parts.append(f"{kind} ({', '.join(named)})" if named else kind)
        text = ", ".join(parts)
        share = self.clock_share
        if share is not None:
            text += f"; SM {self.sm_clock_mhz} of {self.sm_clock_max_mhz} MHz ({share * 100:.0f} %)"
        return text


def _kind_of(reason: str) -> str | None:
    if reason == _HW_SLOWDOWN:
        return HARDWARE
    return _REASON_KIND.get(reason)


def _stuck_low(gpu: GpuSnapshot, reasons: tuple[str, ...]) -> bool:
    if gpu.utilisation_gpu is None or gpu.utilisation_gpu < BUSY_UTIL_PCT:
        return False
    if not gpu.sm_clock_mhz or not gpu.sm_clock_max_mhz:
        return False
    if gpu.sm_clock_mhz >= LOW_CLOCK_SHARE * gpu.sm_clock_max_mhz:
        return False
    # Any reason at all (throttle or benign setting) explains the clock; only silence is odd.
    return not reasons


def throttle_verdict(gpu: GpuSnapshot) -> ThrottleVerdict:
    """The verdict for one GPU snapshot."""
    reasons = gpu.clock_event_reasons or ()
    kinds: set[str] = set()
    held: list[str] = []
    specific_hw = {"HW thermal slowdown", "HW power brake slowdown"} & set(reasons)
    for reason in reasons:
        kind = _kind_of(reason)
        if kind is None or reason in _BENIGN:
            continue
        if kind == HARDWARE and specific_hw:
            continue  # the parent bit of a child already named
        kinds.add(kind)
        held.append(reason)
    if _stuck_low(gpu, reasons):
        kinds.add(STUCK_LOW)
    return ThrottleVerdict(
        gpu_index=gpu.index,
        kinds=tuple(k for k in KIND_ORDER if k in kinds),
        reasons=tuple(held),
        sm_clock_mhz=gpu.sm_clock_mhz,
        sm_clock_max_mhz=gpu.sm_clock_max_mhz,
        utilisation_gpu=gpu.utilisation_gpu,
        reasons_known=gpu.clock_event_reasons is not None,
    )


def reading_verdicts(reading: GpuReading) -> tuple[ThrottleVerdict, ...]:
    """A verdict per GPU in the reading (none when NVML found no GPU)."""
    return tuple(throttle_verdict(gpu) for gpu in reading.gpus)


def throttle_kinds(reading: GpuReading) -> tuple[str, ...]:
    """Every kind of throttling on any GPU of the reading, most urgent first."""
    seen = {kind for verdict in reading_verdicts(reading) for kind in verdict.kinds}
    return tuple(k for k in KIND_ORDER if k in seen)


def persistent_kinds(previous: Iterable[str], current: Iterable[str]) -> tuple[str, ...]:
    """`current` without a clock "stuck low" that the previous sample did not also show:
    NVML's utilisation is averaged over its last period while the clock is instantaneous, so
    one sample as a load starts can show a busy GPU still ramping its clock up."""
    before = set(previous)
    return tuple(k for k in current if k != STUCK_LOW or STUCK_LOW in before)


def order_kinds(kinds: Iterable[str]) -> tuple[str, ...]:
    """Kinds (e.g. gathered over a run) in KIND_ORDER, each once."""
    seen = set(kinds)
    return tuple(k for k in KIND_ORDER if k in seen) + tuple(sorted(seen - set(KIND_ORDER)))
