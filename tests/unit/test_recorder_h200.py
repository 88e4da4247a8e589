"""The flight recorder's GPU columns against nvidia-smi, from a run on a real H200.

tests/fixtures/nvml/h200_flight.json is RECORDED on the lent H200 by tools/record_flight.py:
a real FlightRecorder recording real TelemetrySampler samples at 1 Hz (4 s idle, then 10 s
under an 8192x8192 bf16 matmul loop), the rows read back from its SQLite file, and after each
sample `nvidia-smi --query-gpu` reading the same figures (a few milliseconds later, so clocks
and power that move by the millisecond get a tolerance; the rest must match).
"""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import pytest

from sparkdeck.host.nvml import decode_clock_event_reasons
from sparkdeck.recorder.postmortem import judge
from sparkdeck.recorder.rows import RecordedSample

FLIGHT = json.loads(
    (Path(__file__).parents[1] / "fixtures" / "nvml" / "h200_flight.json").read_text()
)
ROWS = [RecordedSample(**row) for row in FLIGHT["rows"]]
SMI = [line["line"].split(", ") for line in FLIGHT["nvidia_smi"]]


def test_the_fixture_is_a_recording_from_a_real_h200() -> None:
    assert FLIGHT["_note"].startswith("Recorded") and "matmul" in FLIGHT["machine"]["load"]
    assert len(ROWS) == len(SMI) == 14
    assert [r.engine_state for r in ROWS] == ["idle"] * 4 + ["matmul load"] * 10
    # one row a second, as the service records
    gaps = [b.t - a.t for a, b in itertools.pairwise(ROWS[4:])]  # under load
    assert all(0.95 <= gap <= 1.2 for gap in gaps), gaps


@pytest.mark.parametrize("index", range(14))
def test_each_row_agrees_with_nvidia_smi_read_right_after(index: int) -> None:
    row = ROWS[index]
    _, sm, sm_max, power, temp, util, mask = SMI[index]
    assert row.gpu_sm_max_mhz == int(sm_max) == 1980
    assert row.gpu_sm_mhz is not None and abs(row.gpu_sm_mhz - int(sm)) <= 0.05 * int(sm)
    assert row.gpu_power_w is not None and abs(row.gpu_power_w - float(power)) <= 5.0
    assert row.gpu_temp_c is not None and abs(row.gpu_temp_c - int(temp)) <= 1
    assert row.gpu_util is not None and abs(row.gpu_util - int(util)) <= 5
    assert set((row.gpu_reasons or "").split(",")) == set(decode_clock_event_reasons(int(mask, 16)))


def test_the_load_rows_are_power_capped_and_the_postmortem_says_so() -> None:
    assert all(r.throttle is None for r in ROWS[:4])  # idle: reason "idle", not throttled
    assert all(r.throttle == "power cap" for r in ROWS[4:])
    assert all(r.mem_total and r.mem_available for r in ROWS)  # that machine's /proc
    verdict = judge(ROWS, ROWS[0].t, rebooted=True)
    assert verdict.memory == "normal" and verdict.throttled_rows == 10
    assert "the GPU was throttled (power cap) in 10 of 14 readings" in verdict.verdict
