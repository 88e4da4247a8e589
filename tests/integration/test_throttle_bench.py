"""A benchmark run taken while the GPU was throttled says so: in its stored peaks, its text
report and its CSV row.

The GPU answers are replays of tests/fixtures/nvml/h200_clock_events.json, RECORDED on the
lent H200 (idle samples: not throttled; load samples: SW power cap at ~690 of 700 W). The
memory and PSI readers are the real ones of this machine.
"""

from __future__ import annotations

import csv
import io
import time
from dataclasses import replace
from pathlib import Path

from sparkdeck.bench.report import print_run, to_csv
from sparkdeck.bench.sampler import ResourceSampler
from sparkdeck.bench.store import BenchStore
from sparkdeck.host.nvml import NvmlReader
from tests.support.bench_records import CONFIG, fp, outcome
from tools.record_nvml import RecordedNvml

EVENTS = Path(__file__).parents[1] / "fixtures" / "nvml" / "h200_clock_events.json"


def replay() -> tuple[RecordedNvml, NvmlReader]:
    nvml = RecordedNvml(EVENTS)
    return nvml, NvmlReader(nvml, host_total_bytes=nvml.host_mem_total_bytes)


def stored_report(peaks) -> tuple[dict, str, dict]:
    store = BenchStore()
    run_id = store.begin_run(fp("llamacpp"), CONFIG, "2026-01-01T00:00:00+00:00")
    store.finish_run(run_id, replace(outcome(), peaks=peaks))
    [run] = store.runs()
    out = io.StringIO()
    print_run(run, out)
    [row] = list(csv.DictReader(io.StringIO(to_csv([run]))))
    return run.peaks, out.getvalue(), row


def test_one_throttled_sample_marks_the_run() -> None:
    nvml, reader = replay()
    sampler = ResourceSampler(gpu=reader)
    idle, load = nvml.indices("idle"), nvml.indices("load")
    for index in [idle[0], idle[1], load[0], idle[2]]:
        nvml.use(index)
        sampler.sample_once()
    peaks = sampler.stop()  # one more reading, still at the idle sample
    assert (peaks.samples, peaks.gpu_samples, peaks.throttled_samples) == (5, 5, 1)
    assert peaks.throttle == ("power cap",)
    stored, text, row = stored_report(peaks)
    assert stored["throttle"] == ["power cap"] and stored["throttled_samples"] == 1
    assert "GPU throttled during the run (power cap) in 1 of 5 samples" in text
    assert row["gpu_throttle"] == "power-cap"


def test_an_unthrottled_run_says_nothing_about_throttling() -> None:
    nvml, reader = replay()
    sampler = ResourceSampler(gpu=reader)
    for index in nvml.indices("idle"):
        nvml.use(index)
        sampler.sample_once()
    peaks = sampler.stop()
    assert peaks.gpu_samples == peaks.samples and peaks.throttled_samples == 0
    stored, text, row = stored_report(peaks)
    assert stored["throttle"] == [] and "throttled" not in text and row["gpu_throttle"] == ""


def test_the_sampler_thread_counts_every_sample_under_load() -> None:
    nvml, reader = replay()
    nvml.use(nvml.indices("load")[3])
    sampler = ResourceSampler(hz=20.0, gpu=reader)
    sampler.start()
    time.sleep(0.4)
    peaks = sampler.stop()
    assert peaks.samples >= 4 and peaks.throttled_samples == peaks.gpu_samples == peaks.samples
    assert peaks.min_available_bytes is not None  # the real /proc/meminfo of this machine


def test_a_clock_stuck_low_counts_from_its_second_sample_in_a_row() -> None:
    """FAKE stuck clock: a recorded load sample with no reason, util 100 %, SM 700 MHz."""
    from tests.support.throttle_recordings import LOAD, RECORDING, doctored

    stuck = doctored(RECORDING, LOAD, mask=0, util=100, sm=700)
    nvml = RecordedNvml(stuck)
    sampler = ResourceSampler(gpu=NvmlReader(nvml, host_total_bytes=nvml.host_mem_total_bytes))
    idle = nvml.indices("idle")[0]
    for index in [idle, LOAD, idle]:  # one stuck sample alone: a clock still ramping up
        nvml.use(index)
        sampler.sample_once()
    assert sampler.peaks.throttled_samples == 0 and sampler.peaks.throttle == ()
    for index in [LOAD, LOAD, LOAD]:
        nvml.use(index)
        sampler.sample_once()
    assert sampler.peaks.throttled_samples == 2 and sampler.peaks.throttle == ("clock stuck low",)
    assert "last_kinds" not in sampler.peaks.to_dict()
