"""Memory pressure from the kernel's pressure-stall information (/proc/pressure/memory).

`some` is the share of time at least one task stalled waiting for memory, `full` the share in
which every non-idle task did (thrashing). The kernel's avg10/avg60/avg300 are percentages
smoothed over 10/60/300 s; `total` is the cumulative stall in microseconds. A rate computed
from two `total` readings reacts within one sampling interval, which is what a watchdog needs
on a Spark, where the host can wedge faster than avg10 climbs (kernel psi.rst).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

PRESSURE_MEMORY = Path("/proc/pressure/memory")


class PsiError(OSError):
    """Pressure information is missing (kernel without PSI, psi=0 on the command line) or
    could not be parsed."""


@dataclass(frozen=True)
class PsiLine:
    """One line of a pressure file: percentages and the cumulative stall in microseconds."""

    avg10: float
    avg60: float
    avg300: float
    total_us: int


@dataclass(frozen=True)
class PsiSnapshot:
    """Both lines of /proc/pressure/memory, read at `monotonic` seconds."""

    some: PsiLine
    full: PsiLine
    monotonic: float


@dataclass(frozen=True)
class PsiRates:
    """Stall rates between two snapshots, in percent of wall time (0-100)."""

    some_pct: float
    full_pct: float
    interval_s: float


def parse_pressure(text: str, monotonic: float) -> PsiSnapshot:
    """Parse `some avg10=.. avg60=.. avg300=.. total=..` and the matching `full` line.

    Kernels before 5.13 have no `full` line for the CPU file, but memory always has both; a
    missing line here is an error, not a zero.
    """
    lines: dict[str, PsiLine] = {}
    for raw in text.splitlines():
        kind, _, rest = raw.strip().partition(" ")
        if kind not in ("some", "full"):
            continue
        fields: dict[str, str] = {}
        for item in rest.split():
            key, sep, value = item.partition("=")
            if sep:
                fields[key] = value
        try:
            lines[kind] = PsiLine(
                float(fields["avg10"]),
                float(fields["avg60"]),
                float(fields["avg300"]),
                int(fields["total"]),
            )
        except (KeyError, ValueError):
            raise PsiError(f"cannot read the pressure line {raw.strip()!r}") from None
    missing = [kind for kind in ("some", "full") if kind not in lines]
    if missing:
        raise PsiError(f"pressure information lacks the {' and '.join(missing)} line")
    return PsiSnapshot(lines["some"], lines["full"], monotonic)


def read_pressure(path: Path = PRESSURE_MEMORY, *, monotonic: float | None = None) -> PsiSnapshot:
    """Read memory pressure now. Raises PsiError when the kernel offers none."""
    now = time.monotonic() if monotonic is None else monotonic
    try:
        text = path.read_text()
    except OSError as exc:
        raise PsiError(
            f"cannot read {path}: {exc.strerror or exc} (the kernel needs "
            "CONFIG_PSI and must not be booted with psi=0)"
        ) from exc
    return parse_pressure(text, now)


def stall_rates(before: PsiSnapshot, after: PsiSnapshot) -> PsiRates | None:
    """Stall rates over the interval between two snapshots.

    None when the interval is not positive, or when a total went backwards (a different
    source, or a counter that was reset): no rate is better than a made-up one.
    """
    interval = after.monotonic - before.monotonic
    some = after.some.total_us - before.some.total_us
    full = after.full.total_us - before.full.total_us
    if interval <= 0 or some < 0 or full < 0:
        return None
    scale = 100.0 / (interval * 1_000_000)
    return PsiRates(min(100.0, some * scale), min(100.0, full * scale), interval)
