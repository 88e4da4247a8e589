"""What the memory, pressure and GPU panels say, as plain rows: shared by the TUI and the CLI.

Each function turns a TelemetrySnapshot into `Row`s of label, text and a level word the UI
maps to a theme colour ("" plain, "muted", "success", "warning", "error"). Whatever a reader
could not tell is "n/a", never 0; a missing part says why.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from sparkdeck.config.settings import GuardSettings
from sparkdeck.host.meminfo import MemorySnapshot, gib
from sparkdeck.host.throttle import throttle_verdict

if TYPE_CHECKING:  # types only: the TUI's glance strip uses this module before its first
    # frame, and the sampler with every host reader loads after it (ui.screen_layout)
    from sparkdeck.host.nvml import GpuSnapshot
    from sparkdeck.telemetry.sampler import TelemetrySnapshot

NA = "n/a"


@dataclass(frozen=True)
class Row:
    """One line of a panel: a label, its text, and how loudly to show it."""

    label: str
    value: str
    level: str = ""


@dataclass(frozen=True)
class Bar:
    """One bar of the memory panel: a share of MemTotal and the words beside it."""

    label: str
    fraction: float
    text: str
    level: str = ""


_BLOCKS = " ▁▂▃▄▅▆▇█"


def spark_text(values: Sequence[float], width: int, high: float, low: float = 0.0) -> str:
    """A sparkline of `width` cells on a fixed scale low..high (the newest on the right).

    A fixed scale keeps 3.3 % and 3.4 % of memory looking alike; a min-max scale would draw
    that as a cliff. With more values than cells each cell shows the highest of its share,
    so a short spike is never averaged away; with fewer, the line starts part-way across
    (blank = no sample yet; the lowest block = at or near `low`).
    """
    if width <= 0:
        return ""
    if len(values) > width:
        step = len(values) / width
        cells = [
            max(values[int(i * step) : max(int(i * step) + 1, int((i + 1) * step))])
            for i in range(width)
        ]
    else:
        cells = list(values)
    span = (high - low) or 1.0
    top = len(_BLOCKS) - 1
    text = "".join(_BLOCKS[max(1, min(top, round((v - low) / span * top)))] for v in cells)
    return text.rjust(width, " ")


def clock_spark_text(
    points: Sequence[tuple[float, float]], width: int, high: float, span_s: float
) -> str:
    """A sparkline of `width` cells over the last `span_s` seconds of (time, value) points
    (oldest first): each cell a fixed stretch of span_s / width seconds on the clock, the
    newest cell the one the newest point fell in, drawn at the highest value in it on a
    fixed scale 0..high.

    Cells are stretches of the clock, not shares of the samples (spark_text): a cell holds
    the same seconds until the line moves on by a whole cell. So the line says what its
    label says ("5m") from the first sample on, instead of growing a cell a sample while the
    history fills; a spike stays in its cell instead of hopping as share bounds slide; and
    a line whose values hold still does not change, which costs the window no repaint
    (the idle window's frames: docs/performance.md). A cell that no sample fell in after the
    first one (cells shorter than the sampling period) carries the cell before it.
    """
    if width <= 0:
        return ""
    if not points or span_s <= 0:
        return " " * width
    cell_s = span_s / width
    # the newest point by its time, not its place: two sources (the service's feed and the
    # window's own sampling around a handover) can hand the history a sample out of order
    newest = max(taken_at for taken_at, _ in points)
    first = math.floor(newest / cell_s) - width + 1  # the oldest cell's number
    cells: list[float | None] = [None] * width
    for taken_at, value in points:
        index = math.floor(taken_at / cell_s) - first
        if 0 <= index < width:
            held = cells[index]
            if held is None or value > held:
                cells[index] = value
    top = len(_BLOCKS) - 1
    text: list[str] = []
    carried: float | None = None
    for cell in cells:
        carried = cell if cell is not None else carried
        text.append(
            " " if carried is None else _BLOCKS[max(1, min(top, round(carried / high * top)))]
        )
    return "".join(text)


def _pct(part: int, whole: int) -> float:
    return part / whole if whole else 0.0


def memory_bars(memory: MemorySnapshot, guard: GuardSettings = GuardSettings()) -> list[Bar]:
    """used / available / page cache / swap as shares of their totals."""
    available_pct = 100.0 * _pct(memory.available, memory.total)
    level = (
        "error"
        if available_pct < guard.stop_available_pct
        else "warning"
        if available_pct < guard.warn_available_pct
        else ""
    )
    swap_used = memory.swap_total - memory.swap_free
    bars = [
        Bar(
            "used",
            _pct(memory.used, memory.total),
            f"{memory.used / 2**30:.1f} of {gib(memory.total)}",
            level,
        ),
        Bar(
            "available",
            _pct(memory.available, memory.total),
            f"{gib(memory.available)} ({available_pct:.0f} %)",
            level or "success",
        ),
        Bar("cache", _pct(memory.page_cache, memory.total), gib(memory.page_cache), "muted"),
    ]
    if memory.swap_total:
        bars.append(
            Bar(
                "swap",
                _pct(swap_used, memory.swap_total),
                f"{swap_used / 2**30:.1f} of {gib(memory.swap_total)}",
                "warning" if swap_used else "muted",
            )
        )
    else:
        bars.append(Bar("swap", 0.0, "none", "muted"))
    return bars


def pressure_rows(snapshot: TelemetrySnapshot, guard: GuardSettings = GuardSettings()) -> list[Row]:
    """PSI as a small table: `some` and `full` side by side, the rate from the last two
    totals ("now") above the kernel's 10 s / 60 s / 300 s averages, all in percent."""
    psi = snapshot.pressure
    if psi is None:
        return [Row("PSI", snapshot.pressure_error or NA, "warning")]
    rates = snapshot.pressure_rates

    def level(some: float, full: float) -> str:
        if full > guard.stop_full_rate_pct:
            return "error"
        return "warning" if some > guard.warn_some_avg10 or full > 0 else ""

    rows = [Row("", f"{'some':>6} {'full':>6}", "muted")]
    if rates is None:
        rows.append(Row("now", f"{'…':>6} {'…':>6}", "muted"))
    else:
        rows.append(
            Row(
                "now",
                f"{rates.some_pct:6.1f} {rates.full_pct:6.1f}",
                level(rates.some_pct, rates.full_pct),
            )
        )
    for name in ("avg10", "avg60", "avg300"):
        some, full = getattr(psi.some, name), getattr(psi.full, name)
        rows.append(Row(name, f"{some:6.1f} {full:6.1f}", level(some, full)))
    return rows


def _mhz(now: int | None, most: int | None) -> str:
    if now is None:
        return NA
    return f"{now} / {most} MHz" if most is not None else f"{now} MHz"


def _power(gpu: GpuSnapshot) -> str:
    draw = NA if gpu.power_w is None else f"{gpu.power_w:.1f} W"
    limit = NA if gpu.power_limit_w is None else f"{gpu.power_limit_w:.0f} W"
    return f"{draw} (limit {limit})"


def _gpu_memory(gpu: GpuSnapshot, unified: bool, memory: MemorySnapshot | None) -> Row:
    if unified:
        shared = (
            f"used {gib(memory.used)} of {gib(memory.total)} (host)"
            if memory is not None
            else "see memory"
        )
        return Row("memory", f"unified · {shared}", "muted")
    if gpu.memory_total is None or gpu.memory_used is None:
        return Row("memory", NA, "muted")
    return Row("memory", f"{gib(gpu.memory_used)} of {gib(gpu.memory_total)}")


def _processes(gpu: GpuSnapshot) -> str:
    if gpu.processes is None:
        return NA
    if not gpu.processes:
        return "none"
    return ", ".join(
        f"{pid}" + ("" if used is None else f" {gib(used)}") for pid, used in gpu.processes[:4]
    ) + (f" +{len(gpu.processes) - 4}" if len(gpu.processes) > 4 else "")


def gpu_rows(snapshot: TelemetrySnapshot) -> list[Row]:
    """The GPU panel: one block per GPU, or why there is none."""
    reading = snapshot.gpu
    if not reading.gpus:
        return [Row("GPU", reading.error or "NVML found no GPU", "warning")]
    rows: list[Row] = []
    for gpu in reading.gpus:
        util = NA if gpu.utilisation_gpu is None else f"{gpu.utilisation_gpu} %"
        events = (
            NA if gpu.clock_event_reasons is None else ", ".join(gpu.clock_event_reasons) or "none"
        )
        verdict = throttle_verdict(gpu)
        rows += [
            Row("GPU", f"{gpu.index}: {gpu.name or NA}", "success"),
            Row("util", util),
            Row("SM", _mhz(gpu.sm_clock_mhz, gpu.sm_clock_max_mhz)),
            Row("mem clk", _mhz(gpu.mem_clock_mhz, gpu.mem_clock_max_mhz)),
            Row("power", _power(gpu)),
            Row("temp", NA if gpu.temperature_c is None else f"{gpu.temperature_c} °C"),
            Row("P-state", NA if gpu.pstate is None else f"P{gpu.pstate}"),
            Row("events", events, "warning" if verdict.throttled else ""),
            # only when held back: a quiet GPU needs no extra line
            *([Row("throttle", verdict.short(), verdict.level)] if verdict.throttled else []),
            _gpu_memory(gpu, reading.unified_memory, snapshot.memory),
            Row(
                "fan",
                NA if gpu.fan_percent is None else f"{gpu.fan_percent} %",
                "muted" if gpu.fan_percent is None else "",
            ),
            Row("procs", _processes(gpu)),
        ]
        rows += [Row("error", text, "error") for text in gpu.errors]
    if reading.error:
        rows.append(Row("NVML", reading.error, "warning"))
    return rows


def rail_rows(snapshot: TelemetrySnapshot) -> list[Row]:
    """spark_hwmon's power rails; nothing at all when the module is not loaded."""
    if snapshot.rails_error:
        return [Row("rails", snapshot.rails_error, "error")]
    if not snapshot.rails:
        return []
    return [Row("rails", "spark_hwmon", "muted")] + [
        Row(
            f" {rail.label}",
            f"{rail.watts:.1f} W"
            + ("" if rail.cap_watts is None else f" (cap {rail.cap_watts:.0f} W)"),
        )
        for rail in snapshot.rails
    ]


def text_report(snapshot: TelemetrySnapshot) -> str:
    """Every panel as plain lines, for `sparkdeck telemetry`."""
    lines = ["memory"]
    if snapshot.memory is None:
        lines.append(f"  {snapshot.memory_error or NA}")
    else:
        # the share once: a bar whose words carry it already ("22.0 GiB (93 %)") gets no
        # second, differently rounded copy in front ("93.4 %")
        lines += [
            f"  {bar.label:<10}"
            + ("" if "%" in bar.text else f"{bar.fraction * 100:5.1f} %  ")
            + bar.text
            for bar in memory_bars(snapshot.memory)
        ]
    lines.append("pressure (PSI memory, % of time stalled)")
    lines += [f"  {row.label:<10}{row.value}" for row in pressure_rows(snapshot)]
    lines.append("gpu")
    lines += [f"  {row.label:<10}{row.value}" for row in gpu_rows(snapshot)]
    rails = rail_rows(snapshot)
    if rails:
        lines.append("power rails (spark_hwmon)")
        lines += [f"  {row.label.strip():<10}{row.value}" for row in rails[1:]]
    return "\n".join(lines)
