"""The at-a-glance strip: what a user watches, on screen whatever tab is open.

MemAvailable in the memory guard's colour, PSI some/full now, the engine's state with its
tok/s and queue, the GPU's SM clock, power, temperature and throttle verdict, each with a
short sparkline where the width allows. It samples nothing itself: the machine tab hands it
each telemetry sample (with the history its sparklines already draw from) and the metrics
tab each engine-metrics trail, so the strip costs one redraw per sample, no second sampler
(benchmarks/tui_idle.py measures it). The words are built by `glance_parts`, a plain
function of those readings, and laid out by `glance_content` for the width there is: one
line with sparklines, one without, or wrapped over more lines on a narrow terminal.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from textual.content import Content
from textual.reactive import var

from sparkdeck.config.settings import GuardSettings
from sparkdeck.host.throttle import throttle_verdict
from sparkdeck.telemetry.view import NA, spark_text
from sparkdeck.ui.machine.live import LEVEL_STYLE, LiveText

if TYPE_CHECKING:
    from sparkdeck.metrics.snapshot import EngineMetrics
    from sparkdeck.telemetry.sampler import TelemetrySnapshot
    from sparkdeck.ui.dashboard.engine_card import DockerFailure
    from sparkdeck.ui.readers import EngineReading

SPARK = 8  # cells of each sparkline, when the line has room for them
GAP = " │ "
History = Mapping[str, Sequence[tuple[float, float]]]  # (taken_at, value) points


@dataclass(frozen=True)
class Part:
    """One item of the strip: a bold label, a value in a level's colour, and a series."""

    label: str
    value: str
    level: str = ""
    series: Sequence[float] = ()
    high: float = 100.0

    def content(self, spark: int) -> Content:
        parts: list[str | tuple[str, str]] = [
            (self.label, "bold"),
            " ",
            (self.value, LEVEL_STYLE[self.level]),
        ]
        if spark and self.series:
            parts += [" ", (spark_text(self.series, spark, self.high), "$primary")]
        return Content.assemble(*parts)


def memory_part(snapshot: TelemetrySnapshot | None, history: History, guard: GuardSettings) -> Part:
    if snapshot is None:
        return Part("avail", "…", "muted")
    memory = snapshot.memory
    if memory is None:
        return Part("avail", snapshot.memory_error or NA, "error")
    pct = 100.0 * memory.available / memory.total if memory.total else 0.0
    level = (
        "error"
        if pct < guard.stop_available_pct
        else "warning"
        if pct < guard.warn_available_pct
        else "success"
    )
    available = [100.0 - used for _, used in history.get("memory_used_pct", ())]
    return Part("avail", f"{memory.available / 2**30:.1f} GiB {pct:.0f}%", level, available)


def pressure_part(
    snapshot: TelemetrySnapshot | None, history: History, guard: GuardSettings
) -> Part:
    if snapshot is None or snapshot.pressure_rates is None:
        why = snapshot.pressure_error if snapshot is not None else None
        return Part("PSI", why or "…", "warning" if why else "muted")
    rates = snapshot.pressure_rates
    level = (
        "error"
        if rates.full_pct > guard.stop_full_rate_pct
        else "warning"
        if rates.some_pct > guard.warn_some_avg10 or rates.full_pct > 0
        else ""
    )
    some = [value for _, value in history.get("psi_some_pct", ())]
    # stalls are small numbers that matter: the scale is 10 % unless they go higher
    return Part(
        "PSI",
        f"{rates.some_pct:.1f}/{rates.full_pct:.1f}%",
        level,
        some,
        max(10.0, *some) if some else 10.0,
    )


def engine_part(
    docker: EngineReading | DockerFailure | None, trail: Sequence[EngineMetrics]
) -> Part:
    from sparkdeck.ui.readers import EngineReading

    if not isinstance(docker, EngineReading):
        return Part(
            "engine",
            "Docker unreachable" if docker is not None else "…",
            "warning" if docker is not None else "muted",
        )
    if docker.engine is None:
        latest = trail[-1] if trail else None  # an attached engine: metrics, no container
        if latest is None:
            return Part("engine", "none", "muted")
        state, level = "attached", "success"
    else:
        state = docker.status
        level = {"ready": "success", "starting": "warning"}.get(state, "error")
        latest = trail[-1] if trail else None
    if latest is None or not latest.ok:
        return Part("engine", state, level)
    from sparkdeck.metrics import text

    rates = [m.generation_tps for m in trail if m.ok and m.generation_tps is not None]
    value = (
        f"{state} {text.rate(latest.generation_tps)} tok/s "
        f"q {text.count(latest.running)}+{text.count(latest.waiting)}"
    )
    return Part("engine", value, level, rates, max(rates, default=1.0) or 1.0)


def gpu_part(snapshot: TelemetrySnapshot | None, history: History) -> Part:
    if snapshot is None:
        return Part("GPU", "…", "muted")
    if not snapshot.gpu.gpus:
        return Part("GPU", "none", "muted")
    gpu = snapshot.gpu.gpus[0]
    clock = NA if gpu.sm_clock_mhz is None else f"{gpu.sm_clock_mhz} MHz"
    power = NA if gpu.power_w is None else f"{gpu.power_w:.0f} W"
    temp = NA if gpu.temperature_c is None else f"{gpu.temperature_c}°C"
    verdict = throttle_verdict(gpu)
    held = f" {', '.join(verdict.kinds)}" if verdict.throttled else ""
    series = [value for _, value in history.get("gpu_power_w", ())]
    top = gpu.power_limit_w or max(series, default=1.0) or 1.0
    return Part("GPU", f"{clock} {power} {temp}{held}", verdict.level, series, top)


def glance_parts(
    snapshot: TelemetrySnapshot | None,
    history: History,
    docker: EngineReading | DockerFailure | None,
    trail: Sequence[EngineMetrics],
    guard: GuardSettings,
) -> list[Part]:
    return [
        memory_part(snapshot, history, guard),
        pressure_part(snapshot, history, guard),
        engine_part(docker, trail),
        gpu_part(snapshot, history),
    ]


def glance_content(parts: Sequence[Part], width: int) -> Content:
    """One line with sparklines if it fits, else one without, else the parts wrapped. Each
    part's text is built once per try (it is drawn every second, twice with an engine up)."""
    for spark in (SPARK, 0):
        texts = [part.content(spark) for part in parts]
        if sum(text.cell_length for text in texts) + len(GAP) * (len(texts) - 1) <= width:
            return Content(GAP).join(texts)
    lines: list[list[Content]] = [[]]
    used = 0
    for text in texts:  # without sparklines, from the last try
        size = text.cell_length
        if lines[-1] and used + len(GAP) + size > width:
            lines.append([])
            used = 0
        used += size + (len(GAP) if lines[-1] else 0)
        lines[-1].append(text)
    return Content("\n").join(Content(GAP).join(line) for line in lines)


class GlanceStrip(LiveText):
    """The strip itself (see the module docstring); the app binds `docker` into it. A sample
    whose words are the ones shown costs no repaint, and one that keeps the strip's height
    no layout pass (LiveText)."""

    docker: var[EngineReading | DockerFailure | None] = var(None, always_update=True)

    def __init__(self, guard: GuardSettings, **kwargs: Any) -> None:
        super().__init__("", **kwargs)
        self._guard = guard
        self._snapshot: TelemetrySnapshot | None = None
        self._history: History = {}
        self._trail: Sequence[EngineMetrics] = ()

    def telemetry(self, snapshot: TelemetrySnapshot, history: History) -> None:
        """The machine tab's sample (the same one its panels draw)."""
        self._snapshot, self._history = snapshot, history
        self._draw()

    def metrics(self, trail: Sequence[EngineMetrics]) -> None:
        """The metrics tab's trail (empty when it stops sampling)."""
        self._trail = trail
        self._draw()

    def watch_docker(self) -> None:
        self._draw()

    def on_resize(self) -> None:
        self._draw()

    def _draw(self) -> None:
        width = self.content_size.width
        if not width:
            return
        self.set_text(
            glance_content(
                glance_parts(self._snapshot, self._history, self.docker, self._trail, self._guard),
                width,
            )
        )
