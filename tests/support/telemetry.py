"""Deterministic telemetry for UI tests: fixed /proc text and NVML replays.

The /proc texts are fakes shaped like a Spark's (MemTotal ~121.7 GiB, as SPARK.md gives it),
since the test machines are not Sparks; the NVML answers are replays of tests/fixtures/nvml
(the H200 one recorded on a real GPU, the GB10 one written by hand from SPARK.md).
"""

from __future__ import annotations

from pathlib import Path

from sparkdeck.host.hwmon import PowerRail
from sparkdeck.host.meminfo import MemorySnapshot, parse_meminfo
from sparkdeck.host.nvml import GpuReading, NvmlReader
from sparkdeck.host.psi import PsiSnapshot, parse_pressure
from sparkdeck.telemetry.sampler import History, TelemetrySampler
from tools.record_nvml import RecordedNvml

NVML_FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "nvml"
H200 = NVML_FIXTURES / "h200_idle_load.json"
GB10 = NVML_FIXTURES / "gb10_written.json"
CLOCK_EVENTS = NVML_FIXTURES / "h200_clock_events.json"  # an H200 held at its power cap

# A Spark-sized /proc/meminfo with an engine holding ~70 GiB (a fake: no Spark here).
SPARK_MEMINFO = """\
MemTotal:       127615312 kB
MemFree:         9437184 kB
MemAvailable:   41943040 kB
Buffers:          524288 kB
Cached:         31457280 kB
SwapTotal:      16777212 kB
SwapFree:       16252924 kB
"""

PSI_TEXT = """\
some avg10=1.50 avg60=0.70 avg300=0.22 total={some}
full avg10=0.12 avg60=0.05 avg300=0.01 total={full}
"""

SPARK_RAILS = (
    PowerRail("spbm0", "gpu", 61.2),
    PowerRail("spbm0", "dc_input", 97.4),
    PowerRail("spbm0", "syspl1", 88.0, 140.0),
    PowerRail("spbm0", "prereg", 9.1),
)


def fixed_memory() -> MemorySnapshot:
    return parse_meminfo(SPARK_MEMINFO)


class FixedPressure:
    """Each call is one second later, with 30 ms more `some` and 2 ms more `full` stall:
    a 3.0 % some-rate and a 0.2 % full-rate from the second call on."""

    def __init__(self) -> None:
        self.calls = 0

    def __call__(self) -> PsiSnapshot:
        self.calls += 1
        text = PSI_TEXT.format(
            some=4_000_000 + 30_000 * self.calls, full=900_000 + 2_000 * self.calls
        )
        return parse_pressure(text, 100.0 + self.calls)


def replay_sampler(recording: Path, sample: int, rails: bool = False) -> TelemetrySampler:
    """A sampler answering from fixed /proc text and one sample of an NVML recording."""
    nvml = RecordedNvml(recording).use(sample)
    return TelemetrySampler(
        memory=fixed_memory,
        pressure=FixedPressure(),
        gpu=NvmlReader(nvml, host_total_bytes=nvml.host_mem_total_bytes),
        rails=(lambda: SPARK_RAILS) if rails else (lambda: ()),
        clock=lambda: 1000.0,
    )


def replay_history(recording: Path, seconds: int = 300) -> History:
    """Five minutes of history: the recording's samples in turn, one a second."""
    nvml = RecordedNvml(recording)
    reader = NvmlReader(nvml, host_total_bytes=nvml.host_mem_total_bytes)
    clock = [0.0]
    sampler = TelemetrySampler(
        memory=fixed_memory,
        pressure=FixedPressure(),
        gpu=reader,
        rails=lambda: (),
        clock=lambda: clock[0],
    )
    history = History()
    for second in range(seconds):
        nvml.use(second // 15 % len(nvml.samples))
        clock[0] = 700.0 + second
        history.add(sampler.sample())
    return history


def replay(
    path: Path | dict, host_total: int | None = None
) -> tuple[RecordedNvml, list[tuple[str, GpuReading]]]:
    """Every sample of a recording, read by one NvmlReader as a panel would poll it."""
    nvml = RecordedNvml(path)
    total = nvml.host_mem_total_bytes if host_total is None else host_total
    reader = NvmlReader(nvml, host_total_bytes=total)
    readings = []
    for i, sample in enumerate(nvml.samples):
        nvml.use(i)
        readings.append((sample["phase"], reader.read()))
    reader.close()
    return nvml, readings
