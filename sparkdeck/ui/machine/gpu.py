"""The GPU panel: NVML's view of each GPU (n/a where it cannot tell), Spark power rails where
spark_hwmon is loaded, and five minutes of utilisation and power as sparklines."""

from __future__ import annotations

from collections.abc import Mapping

from textual.app import ComposeResult
from textual.containers import Vertical

from sparkdeck.telemetry.sampler import TelemetrySnapshot
from sparkdeck.telemetry.view import gpu_rows, rail_rows
from sparkdeck.ui.machine.live import LiveText, SparkRow, rows_content
from sparkdeck.ui.machine.memory import WAITING


class GpuPanel(Vertical):
    """Renders TelemetrySnapshot.gpu and .rails; never calls NVML itself."""

    def compose(self) -> ComposeResult:
        # Kept as attributes: a sample that lands while the app shuts down finds them still.
        self._rows = LiveText(WAITING, id="gpu-rows", classes="panel-body")
        self._util_spark = SparkRow("util 5m", " %", id="gpu-util-spark", classes="spark-row")
        self._power_spark = SparkRow("power 5m", " W", id="gpu-power-spark", classes="spark-row")
        yield self._rows
        yield self._util_spark
        yield self._power_spark

    def on_mount(self) -> None:
        self.border_title = "GPU"

    def show(self, snapshot: TelemetrySnapshot, history: Mapping[str, tuple[float, ...]]) -> None:
        has_gpu = bool(snapshot.gpu.gpus)
        self._rows.set_text(rows_content(gpu_rows(snapshot) + rail_rows(snapshot)))
        self._util_spark.display = self._power_spark.display = has_gpu
        if has_gpu:
            self._util_spark.show(history["gpu_util_pct"], 100.0)
            power = history["gpu_power_w"]
            limit = snapshot.gpu.gpus[0].power_limit_w
            # A GB10 has no power limit to scale to: its 140 W SoC TDP (SPARK.md) or the
            # highest draw seen, whichever is more.
            self._power_spark.show(power, limit or max(140.0, *power) if power else 140.0)
