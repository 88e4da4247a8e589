"""The machine tab's two panels, each rendering what the telemetry sampler read:

- unified memory: used / available / page cache / swap as bars, PSI beside them, and five
  minutes of memory use and stall rate as sparklines;
- GPU: NVML's view of each GPU (n/a where it cannot tell), Spark power rails where
  spark_hwmon is loaded, and five minutes of utilisation and power as sparklines."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from textual.app import ComposeResult
from textual.containers import Vertical
from textual.content import Content

from sparkdeck.config.settings import GuardSettings
from sparkdeck.telemetry.sampler import HISTORY_SECONDS, Series, TelemetrySnapshot
from sparkdeck.telemetry.view import gpu_rows, memory_bars, pressure_rows, rail_rows
from sparkdeck.ui.machine.live import LiveText, SparkRow, bar_content, rows_content
from sparkdeck.ui.screen_layout import BlankRow

WAITING = Content.styled("reading…", "$text-muted")


class MemoryPanel(Vertical):
    """Unified memory from /proc/meminfo and memory pressure from /proc/pressure/memory."""

    def __init__(self, guard: GuardSettings = GuardSettings(), **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.guard = guard

    def compose(self) -> ComposeResult:
        # Kept as attributes: a sample that lands while the app shuts down finds them still.
        self._bars = LiveText(WAITING, id="memory-bars")
        self._pressure = LiveText("", id="pressure")
        self._used_spark = SparkRow(
            "used 5m", " %", HISTORY_SECONDS, id="memory-spark", classes="spark-row"
        )
        self._psi_spark = SparkRow(
            "PSI some", " %", HISTORY_SECONDS, id="psi-spark", classes="spark-row"
        )
        with BlankRow(classes="panel-body"):
            yield self._bars
            yield self._pressure
        yield self._used_spark
        yield self._psi_spark

    def on_mount(self) -> None:
        self.border_title = "unified memory · PSI"

    def show(self, snapshot: TelemetrySnapshot, history: Mapping[str, Series]) -> None:
        """Render one sample and the history that came with it."""
        if snapshot.memory is None:
            self._bars.set_text(Content.styled(snapshot.memory_error or "n/a", "$error"))
        else:
            # a narrow column (80x24) gets shorter bars so each figure stays on its line
            width = 10 if self._bars.content_size.width >= 40 else 5
            self._bars.set_text(
                Content("\n").join(
                    bar_content(bar, width, label_width=10)
                    for bar in memory_bars(snapshot.memory, self.guard)
                )
            )
        self._pressure.set_text(rows_content(pressure_rows(snapshot, self.guard), 7))
        self._used_spark.show(history["memory_used_pct"], 100.0)
        psi = history["psi_some_pct"]
        # Stalls are small numbers that matter: scale to 10 % unless they go higher.
        self._psi_spark.show(psi, max(10.0, max((value for _, value in psi), default=0.0)))


class GpuPanel(Vertical):
    """Renders TelemetrySnapshot.gpu and .rails; never calls NVML itself."""

    def compose(self) -> ComposeResult:
        # Kept as attributes: a sample that lands while the app shuts down finds them still.
        self._rows = LiveText(WAITING, id="gpu-rows", classes="panel-body")
        self._util_spark = SparkRow(
            "util 5m", " %", HISTORY_SECONDS, id="gpu-util-spark", classes="spark-row"
        )
        self._power_spark = SparkRow(
            "power 5m", " W", HISTORY_SECONDS, id="gpu-power-spark", classes="spark-row"
        )
        yield self._rows
        yield self._util_spark
        yield self._power_spark

    def on_mount(self) -> None:
        self.border_title = "GPU"

    def show(self, snapshot: TelemetrySnapshot, history: Mapping[str, Series]) -> None:
        has_gpu = bool(snapshot.gpu.gpus)
        self._rows.set_text(rows_content(gpu_rows(snapshot) + rail_rows(snapshot)))
        self._util_spark.display = self._power_spark.display = has_gpu
        if has_gpu:
            self._util_spark.show(history["gpu_util_pct"], 100.0)
            power = history["gpu_power_w"]
            limit = snapshot.gpu.gpus[0].power_limit_w
            # A GB10 has no power limit to scale to: its 140 W SoC TDP (SPARK.md) or the
            # highest draw seen, whichever is more.
            self._power_spark.show(
                power, limit or max(140.0, max((value for _, value in power), default=0.0))
            )
