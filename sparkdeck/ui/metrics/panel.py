"""The engine metrics panel: sparklines of tok/s and queue depth, and the engine's numbers.

Self-contained: it renders a trail of `EngineMetrics` (oldest first) given through its
`trail` reactive, which MetricsTab (sparkdeck.ui.metrics.tab) binds from its sampling worker.
The render functions are plain so tests can read the words.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from textual.app import ComposeResult
from textual.containers import Vertical
from textual.content import Content
from textual.reactive import reactive
from textual.widgets import Sparkline

from sparkdeck.metrics import text
from sparkdeck.ui.machine.live import LiveText

if TYPE_CHECKING:
    from sparkdeck.metrics.snapshot import EngineMetrics

Trail = tuple["EngineMetrics", ...]
_LABEL_WIDTH = 12


def _line(label: str, *parts: str | tuple[str, str]) -> Content:
    return Content.assemble((label.ljust(_LABEL_WIDTH), "bold"), *parts, end="\n")


def rates_content(trail: Trail) -> Content:
    """The headline above the tok/s sparkline: the rate, or why there is none."""
    if not trail:
        return Content.assemble(("waiting for the first reading…", "$text-muted"))
    m = trail[-1]
    late = [(f"  late: {text.late_words(m)}", "$warning")] if m.late else []
    if not m.ok:
        style = "$warning" if m.status in ("metrics-off", "no-map") else "$error"
        words = {
            "metrics-off": "metrics are off",
            "unreachable": "metrics unreachable",
            "invalid": "metrics page refused",
            "no-map": "no metrics to read",
        }
        return Content.assemble(
            (words.get(m.status, m.status), f"bold {style}"), ": ", m.reason or "", *late
        )
    restarted = [("  counters reset: engine restarted", "$warning")] if m.restarted else []
    return _line(
        "tok/s",
        (text.rate(m.generation_tps), "bold"),
        (
            f"  1 min {text.rate(m.generation_tps_avg)}"
            f" · per stream {text.rate(m.stream_tps)}"
            f" · prompt {text.rate(m.prompt_tps)}",
            "$text-muted",
        ),
        *restarted,
        *late,
    ).rstrip()


def queue_content(trail: Trail) -> Content:
    m = trail[-1] if trail else None
    if m is None or not m.ok:
        return Content("")
    return _line(
        "queue", f"{text.count(m.running)} running · {text.count(m.waiting)} waiting"
    ).rstrip()


def details_content(trail: Trail) -> Content:
    """KV cache, prefix hits, TTFT, speculative acceptance, memory and the ceiling."""
    m = trail[-1] if trail else None
    if m is None or not m.ok:
        return Content("")
    lines = [
        _line(
            "KV cache",
            text.percent(m.kv_usage),
            ("   prefix hits ", "bold"),
            text.percent(m.prefix_hit_rate),
        ),
        _line("TTFT 1 min", f"p50 {text.seconds(m.ttft_p50_s)} · p90 {text.seconds(m.ttft_p90_s)}"),
    ]
    if m.spec_acceptance is not None:
        lines.append(_line("spec accept", text.percent(m.spec_acceptance)))
    if m.memory_bytes is not None:
        models = f"  {', '.join(m.models)}" if m.models else ""
        lines.append(_line("memory", f"{m.memory_bytes / 2**30:.1f} GiB", (models, "$text-muted")))
    if m.ceiling_tps is not None:
        share = (
            text.percent(m.ceiling_share)
            if m.ceiling_share is not None
            else "n/a (no single-stream speed yet)"
        )
        lines.append(
            _line(
                "ceiling",
                (share, "bold"),
                (f" of {text.rate(m.ceiling_tps)} tok/s (273 GB/s bandwidth)", "$text-muted"),
            )
        )
    if m.note:
        lines.append(Content.assemble((m.note, "$text-muted"), end="\n"))
    return Content("").join(lines).rstrip()


def tps_series(trail: Trail) -> list[float]:
    """tok/s of the ok readings (a missing reading is a gap, never a drawn zero)."""
    return [m.generation_tps for m in trail if m.ok and m.generation_tps is not None]


def queue_series(trail: Trail) -> list[float]:
    return [
        (m.running or 0.0) + (m.waiting or 0.0)
        for m in trail
        if m.ok and (m.running is not None or m.waiting is not None)
    ]


class EngineMetricsPanel(Vertical):
    """The running engine's own numbers, with two minutes of tok/s and queue history."""

    trail: reactive[Trail] = reactive((), always_update=True)

    def compose(self) -> ComposeResult:
        # LiveText: a reading whose words are the ones shown costs no repaint, and one that
        # keeps each block's height no layout pass of the screen (a reading a second)
        yield LiveText(id="metrics-rates")
        yield Sparkline([], id="tps-sparkline")
        yield LiveText(id="metrics-queue")
        yield Sparkline([], id="queue-sparkline")
        yield LiveText(id="metrics-details")

    def on_mount(self) -> None:
        self.border_title = "engine metrics"
        self.watch_trail(self.trail)  # a trail bound before the children existed

    def watch_trail(self, trail: Trail) -> None:
        if not self.is_mounted:
            return
        self.query_one("#metrics-rates", LiveText).set_text(rates_content(trail))
        self.query_one("#metrics-queue", LiveText).set_text(queue_content(trail))
        self.query_one("#metrics-details", LiveText).set_text(details_content(trail))
        tps, queue = tps_series(trail), queue_series(trail)
        self.query_one("#tps-sparkline", Sparkline).data = tps
        self.query_one("#queue-sparkline", Sparkline).data = queue
        self.query_one("#tps-sparkline").display = bool(tps)
        self.query_one("#queue-sparkline").display = bool(queue)
