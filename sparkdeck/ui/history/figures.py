"""What the history view draws, read from the flight recording: one value per time slice for
each series, the lowest, highest and latest figure, and the worst moments of the window.

Plain code, no Textual: the view's thread worker calls `read_window`. A window is cut into
`SLICES` equal stretches of time and each is read on its own (`rows_between`), so seven days
at 1 Hz (~600,000 rows) never sit in memory at once, and a long read can stop between
slices when the user picks another window. Each slice keeps its worst value (least
MemAvailable, most stall, most power, fastest tok/s) as the recorder's own `worst_per_slice`
does for `sparkdeck history`, so a short dip is never averaged away. Slices with no readings
(the service was not running) are left out of the lines; the title says how many readings
there were.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from sparkdeck.host.meminfo import gib
from sparkdeck.recorder.query import rows_between, summarise
from sparkdeck.recorder.rows import RecordedSample

# (label, seconds): the windows the view's keys 1-5 choose
WINDOWS: tuple[tuple[str, float], ...] = (
    ("10m", 600.0),
    ("1h", 3600.0),
    ("6h", 21600.0),
    ("24h", 86400.0),
    ("7d", 604800.0),
)
WINDOW_SECONDS = dict(WINDOWS)
PSI_CEILING = 10.0
SLICES = 120  # more than a sparkline is wide at 120 columns; Sparkline buckets the rest


@dataclass(frozen=True)
class SeriesSpec:
    """One line of the view: what it reads from a row, which extreme a slice keeps, and how
    a figure is written."""

    key: str
    title: str
    value: Callable[[RecordedSample], float | None]
    worst: Callable[[Sequence[float]], float]  # min for MemAvailable, max for the rest
    text: Callable[[float], str]
    # the top of the bars, per row (MemTotal; a floor for PSI); None: the window's highest
    ceiling: Callable[[RecordedSample], float | None] = lambda r: None


def _pct(value: float) -> str:
    return f"{value:.1f} %"


SERIES: tuple[SeriesSpec, ...] = (
    SeriesSpec(
        "mem",
        "MemAvailable",
        lambda r: r.mem_available,
        min,
        lambda v: gib(int(v)),
        lambda r: r.mem_total,
    ),
    # PSI's bars reach the top at 10 % or more: a 0.3 % blip is not drawn as a wall
    SeriesSpec(
        "psi-some", "PSI some (avg10)", lambda r: r.psi_some_avg10, max, _pct, lambda r: PSI_CEILING
    ),
    SeriesSpec("psi-full", "PSI full", lambda r: r.psi_full_pct, max, _pct, lambda r: PSI_CEILING),
    SeriesSpec("power", "GPU power", lambda r: r.gpu_power_w, max, lambda v: f"{v:.0f} W"),
    SeriesSpec("tok-s", "tok/s", lambda r: r.tok_s, max, lambda v: f"{v:.1f}"),
)


@dataclass(frozen=True)
class Series:
    """One series over the window: `values` one per slice that held a reading (None where
    that reading lacked this figure: no GPU, no engine)."""

    spec: SeriesSpec
    values: tuple[float | None, ...]
    low: float | None
    high: float | None
    latest: float | None
    ceiling: float  # the top of the bars

    def figures(self) -> str:
        """ "min 3.1 GiB  max 98.0 GiB  latest 40.2 GiB", or why there is no figure."""
        if self.latest is None or self.low is None or self.high is None:
            return "n/a: not recorded in this window"
        text = self.spec.text
        return f"min {text(self.low)}  max {text(self.high)}  latest {text(self.latest)}"


@dataclass(frozen=True)
class HistoryWindow:
    """A window of the recording as the view shows it."""

    label: str
    start: float
    end: float
    rows: int
    first_t: float | None
    last_t: float | None
    series: tuple[Series, ...]
    lowest: RecordedSample | None  # least MemAvailable
    stall: RecordedSample | None  # most PSI full
    throttled_rows: int
    throttle: tuple[str, ...]


class _Accumulator:
    """Per series: the slices' worst values, the overall extremes and the latest value."""

    def __init__(self, spec: SeriesSpec) -> None:
        self.spec = spec
        self.values: list[float | None] = []
        self.low: float | None = None
        self.high: float | None = None
        self.latest: float | None = None
        self.ceiling = 0.0

    def add(self, rows: Sequence[RecordedSample]) -> None:
        values = [float(v) for v in map(self.spec.value, rows) if v is not None]
        if not values:  # a gap in this line, so that every line keeps the same time axis
            self.values.append(None)
            return
        tops = [float(c) for c in map(self.spec.ceiling, rows) if c is not None]
        self.ceiling = max(self.ceiling, *values, *tops)
        self.values.append(self.spec.worst(values))
        self.low = min(values) if self.low is None else min(self.low, *values)
        self.high = max(values) if self.high is None else max(self.high, *values)
        self.latest = values[-1]

    def done(self) -> Series:
        return Series(self.spec, tuple(self.values), self.low, self.high, self.latest, self.ceiling)


def read_window(
    path: Path,
    label: str,
    end: float,
    slices: int = SLICES,
    cancelled: Callable[[], bool] = lambda: False,
    progress: Callable[[float], object] = lambda share: None,
) -> HistoryWindow | None:
    """The window `label` (a WINDOWS label) ending at `end` (epoch seconds); None when
    `cancelled` said so between slices; `progress` hears the share read every tenth of the
    way (7 days at 1 Hz take seconds). RecorderError when the file is missing or broken."""
    seconds = WINDOW_SECONDS[label]
    start = end - seconds
    accumulators = [_Accumulator(spec) for spec in SERIES]
    extremes: list[RecordedSample] = []  # each slice's least-memory and most-stall rows
    count, first_t, last_t, throttled, kinds = 0, None, None, 0, []
    for i in range(slices):
        if cancelled():
            return None
        if i and i % max(1, slices // 10) == 0:
            progress(i / slices)
        low = start + seconds * i / slices
        high = (
            end
            if i == slices - 1
            else math.nextafter(start + seconds * (i + 1) / slices, -math.inf)
        )
        rows = rows_between(path, low, high)
        if not rows:
            continue
        count += len(rows)
        first_t = rows[0].t if first_t is None else first_t
        last_t = rows[-1].t
        for accumulator in accumulators:
            accumulator.add(rows)
        summary = summarise(rows)
        extremes += [r for r in (summary.min_available, summary.max_psi_full) if r is not None]
        throttled += summary.throttled_rows
        kinds += [k for k in summary.throttle if k not in kinds]
    overall = summarise(sorted(extremes, key=lambda r: r.t))
    return HistoryWindow(
        label,
        start,
        end,
        count,
        first_t,
        last_t,
        tuple(a.done() for a in accumulators),
        overall.min_available,
        overall.max_psi_full,
        throttled,
        tuple(kinds),
    )
