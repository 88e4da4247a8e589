"""One flight-recorder row: the figures of one telemetry sample worth keeping after a crash.

`RecordedSample.from_snapshot` takes the telemetry sampler's own `TelemetrySnapshot` (the one
reader of /proc and NVML; nothing here reads the host a second way) plus what the service
knows about the engine. Bytes stay bytes, percentages stay percentages, and whatever a reader
could not tell stays None, so a post-mortem never mistakes "no PSI on this kernel" for "no
pressure".
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields
from typing import Any

from sparkdeck.host.throttle import throttle_kinds
from sparkdeck.telemetry.sampler import TelemetrySnapshot


@dataclass(frozen=True)
class RecordedSample:
    """A row of the `samples` table. `t` is wall-clock epoch seconds (rows must outlive a
    reboot, where monotonic time starts again)."""

    t: float
    mem_total: int | None = None
    mem_available: int | None = None
    mem_free: int | None = None
    cached: int | None = None
    swap_total: int | None = None
    swap_free: int | None = None
    psi_some_avg10: float | None = None
    psi_full_avg10: float | None = None
    psi_some_total_us: int | None = None
    psi_full_total_us: int | None = None
    psi_some_rate: float | None = None  # % of wall time since the previous sample
    psi_full_rate: float | None = None
    gpu_sm_mhz: int | None = None
    gpu_sm_max_mhz: int | None = None
    gpu_mem_mhz: int | None = None
    gpu_power_w: float | None = None
    gpu_temp_c: int | None = None
    gpu_util: int | None = None
    gpu_reasons: str | None = None  # NVML's clock-event reasons, comma-separated
    throttle: str | None = None  # the throttle kinds (sparkdeck.host.throttle), comma-separated
    engine_state: str | None = None  # e.g. "vllm-ngc starting"; None = no engine
    tok_s: float | None = None

    @classmethod
    def from_snapshot(
        cls,
        snapshot: TelemetrySnapshot,
        wall_time: float,
        engine_state: str | None = None,
        tok_s: float | None = None,
    ) -> RecordedSample:
        mem, psi, rates = snapshot.memory, snapshot.pressure, snapshot.pressure_rates
        # The first GPU: a Spark has one, and the rows stay one per second, not per GPU.
        gpu = snapshot.gpu.gpus[0] if snapshot.gpu.gpus else None
        kinds = throttle_kinds(snapshot.gpu)
        return cls(
            t=wall_time,
            mem_total=mem.total if mem else None,
            mem_available=mem.available if mem else None,
            mem_free=mem.free if mem else None,
            cached=mem.cached if mem else None,
            swap_total=mem.swap_total if mem else None,
            swap_free=mem.swap_free if mem else None,
            psi_some_avg10=psi.some.avg10 if psi else None,
            psi_full_avg10=psi.full.avg10 if psi else None,
            psi_some_total_us=psi.some.total_us if psi else None,
            psi_full_total_us=psi.full.total_us if psi else None,
            psi_some_rate=rates.some_pct if rates else None,
            psi_full_rate=rates.full_pct if rates else None,
            gpu_sm_mhz=gpu.sm_clock_mhz if gpu else None,
            gpu_sm_max_mhz=gpu.sm_clock_max_mhz if gpu else None,
            gpu_mem_mhz=gpu.mem_clock_mhz if gpu else None,
            gpu_power_w=gpu.power_w if gpu else None,
            gpu_temp_c=gpu.temperature_c if gpu else None,
            gpu_util=gpu.utilisation_gpu if gpu else None,
            gpu_reasons=(
                None
                if gpu is None or gpu.clock_event_reasons is None
                else ",".join(gpu.clock_event_reasons)
            ),
            throttle=",".join(kinds) if kinds else None,
            engine_state=engine_state,
            tok_s=tok_s,
        )

    @property
    def available_pct(self) -> float | None:
        if self.mem_available is None or not self.mem_total:
            return None
        return 100.0 * self.mem_available / self.mem_total

    @property
    def psi_full_pct(self) -> float | None:
        """The worse of the rate since the last sample and the kernel's 10 s average."""
        values = [v for v in (self.psi_full_rate, self.psi_full_avg10) if v is not None]
        return max(values) if values else None

    @property
    def swap_used(self) -> int | None:
        if self.swap_total is None or self.swap_free is None:
            return None
        return self.swap_total - self.swap_free

    def as_tuple(self) -> tuple[Any, ...]:
        return tuple(getattr(self, name) for name in COLUMNS)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


COLUMNS: tuple[str, ...] = tuple(f.name for f in fields(RecordedSample))
_SQL_TYPES = {"t": "REAL NOT NULL"}


def column_sql() -> str:
    """The columns of the samples table, typed loosely (SQLite keeps what it is given)."""
    return ", ".join(f"{name} {_SQL_TYPES.get(name, '')}".strip() for name in COLUMNS)


def from_row(row: tuple[Any, ...]) -> RecordedSample:
    return RecordedSample(*row)
