"""Throttle detection (sparkdeck.host.throttle) against a real H200's answers and labelled fakes.

tests/fixtures/nvml/h200_clock_events.json is RECORDED on the lent H200 by
`tools/record_nvml.py --light`: 8 samples idle, 8 under an 8192x8192 bf16 matmul loop, 8
under a 2048x2048 one. Both loads held the GPU at its 700 W cap (~690 W, SW power cap named,
SM 1,440-1,785 of 1,980 MHz). Beside it, h200_clock_events_perf_<phase>.txt is
`nvidia-smi -q -d PERFORMANCE` taken right after each phase's last sample.

What the recording lacks (thermal slowdown, power brake, a bare HW slowdown, a clock held low
with no reason, reasons NOT_SUPPORTED) is made by FAKES: a recorded sample copied with its
clock-event mask, clock or utilisation changed (`doctored`), labelled as such where used.
"""

from __future__ import annotations

import json
import re
from typing import Any

import pytest

from sparkdeck.host.nvml import CLOCK_EVENT_REASONS, GpuSnapshot, NvmlReader
from sparkdeck.host.throttle import (
    HARDWARE,
    POWER_CAP,
    STUCK_LOW,
    THERMAL,
    throttle_kinds,
    throttle_verdict,
)
from sparkdeck.telemetry.sampler import TelemetrySampler
from sparkdeck.telemetry.view import gpu_rows
from tests.support.telemetry import GB10, FixedPressure, fixed_memory
from tests.support.throttle_recordings import FIXTURES, LOAD, RECORDING, doctored, phase_indices
from tools.record_nvml import RecordedNvml

BIT = {name: bit for bit, name in CLOCK_EVENT_REASONS}

# nvidia-smi -q -d PERFORMANCE wording -> the reader's names
SMI_NAMES = {
    "Idle": "idle",
    "Applications Clocks Setting": "applications clocks setting",
    "SW Power Cap": "SW power cap",
    "HW Slowdown": "HW slowdown",
    "HW Thermal Slowdown": "HW thermal slowdown",
    "HW Power Brake Slowdown": "HW power brake slowdown",
    "Sync Boost": "sync boost",
    "SW Thermal Slowdown": "SW thermal slowdown",
    "Display Clock Setting": "display clock setting",
}


def read(recording: dict[str, Any], index: int) -> GpuSnapshot:
    nvml = RecordedNvml(recording).use(index)
    reading = NvmlReader(nvml, host_total_bytes=recording["host_mem_total_bytes"]).read()
    assert reading.ok
    return reading.gpus[0]


def smi_active(phase: str) -> set[str]:
    text = (FIXTURES / f"h200_clock_events_perf_{phase}.txt").read_text()
    block = text.split("Clocks Event Reasons\n", 1)[1].split("Clocks Event Reasons Counters")[0]
    return {
        SMI_NAMES[m.group(1).strip()]
        for m in re.finditer(r"^\s+([A-Za-z ]+?)\s+: Active$", block, re.M)
    }


def test_the_recording_is_labelled_as_recorded_on_an_h200() -> None:
    assert RECORDING["_note"].startswith("Recorded")
    assert "8192x8192" in RECORDING["machine"]["load"]
    assert [len(phase_indices(RECORDING, p)) for p in ("idle", "load", "light")] == [8, 8, 8]


def test_recorded_idle_h200_is_not_throttled() -> None:
    for index in phase_indices(RECORDING, "idle"):
        verdict = throttle_verdict(read(RECORDING, index))
        # clocks at 345 of 1980 MHz, but NVML says "idle": a low clock with a reason
        assert verdict.sm_clock_mhz is not None and verdict.sm_clock_mhz < 400
        assert not verdict.throttled and verdict.reasons_known
        assert verdict.describe() == "not throttled"


@pytest.mark.parametrize("phase", ["load", "light"])
def test_recorded_h200_under_matmul_is_power_capped(phase: str) -> None:
    for index in phase_indices(RECORDING, phase):
        gpu = read(RECORDING, index)
        verdict = throttle_verdict(gpu)
        assert verdict.kinds == (POWER_CAP,) and verdict.reasons == ("SW power cap",)
        assert gpu.power_w is not None and gpu.power_w > 0.95 * (gpu.power_limit_w or 0)
        assert verdict.describe() == (
            f"power cap (SW power cap); SM {gpu.sm_clock_mhz} of 1980 MHz "
            f"({gpu.sm_clock_mhz / 1980 * 100:.0f} %)"
        )


@pytest.mark.parametrize("phase", ["idle", "load", "light"])
def test_recorded_reasons_agree_with_nvidia_smi_performance(phase: str) -> None:
    last = phase_indices(RECORDING, phase)[-1]
    assert set(read(RECORDING, last).clock_event_reasons or ()) == smi_active(phase)


@pytest.mark.parametrize(
    ("mask", "util", "sm", "kinds", "reasons"),
    [
        (BIT["SW thermal slowdown"], None, None, (THERMAL,), ("SW thermal slowdown",)),
        # HW slowdown is the parent bit of HW thermal and HW power brake: only the child is named
        (
            BIT["HW thermal slowdown"] | BIT["HW slowdown"],
            None,
            None,
            (THERMAL,),
            ("HW thermal slowdown",),
        ),
        (
            BIT["HW power brake slowdown"] | BIT["HW slowdown"],
            None,
            None,
            (POWER_CAP,),
            ("HW power brake slowdown",),
        ),
        (BIT["HW slowdown"], None, None, (HARDWARE,), ("HW slowdown",)),
        (
            BIT["SW power cap"] | BIT["SW thermal slowdown"],
            None,
            None,
            (THERMAL, POWER_CAP),
            ("SW power cap", "SW thermal slowdown"),
        ),
        # busy, 700 of 1980 MHz, no reason at all: the clock is stuck low
        (0, 100, 700, (STUCK_LOW,), ()),
        (0, 100, 1980, (), ()),  # busy at full clock: fine
        (0, 30, 700, (), ()),  # low clock but not busy
        (BIT["applications clocks setting"], 100, 700, (), ()),  # a user's setting explains it
        (BIT["sync boost"], 100, 700, (), ()),
    ],
    ids=[
        "sw-thermal",
        "hw-thermal",
        "power-brake",
        "hw-slowdown",
        "cap+thermal",
        "stuck-low",
        "busy-full-clock",
        "not-busy",
        "app-clocks",
        "sync-boost",
    ],
)
def test_fake_reasons_the_recording_lacks(
    mask: int, util: int | None, sm: int | None, kinds: tuple[str, ...], reasons: tuple[str, ...]
) -> None:
    verdict = throttle_verdict(read(doctored(RECORDING, LOAD, mask=mask, util=util, sm=sm), LOAD))
    assert verdict.kinds == kinds and verdict.reasons == reasons
    assert verdict.throttled == bool(kinds)


def test_reasons_not_supported_still_catches_a_stuck_clock() -> None:
    unknown = throttle_verdict(read(doctored(RECORDING, LOAD, mask="unsupported"), LOAD))
    assert not unknown.reasons_known and not unknown.throttled
    assert unknown.describe() == "no reasons from NVML"
    stuck = throttle_verdict(read(doctored(RECORDING, LOAD, mask="unsupported", sm=600), LOAD))
    assert stuck.kinds == (STUCK_LOW,)


def gb10_recording() -> dict[str, Any]:
    data = json.loads(GB10.read_text())
    assert "WRITTEN BY HAND" in data["_note"]
    return data


def test_gb10_shape_busy_near_max_is_fine_and_clamped_clock_is_stuck_low() -> None:
    """GB10 fixture (written by hand): its load sample gives no reason at 2405 of 2520 MHz;
    the same sample with the SM clock at 1,100 MHz (FAKE) is a clock stuck low."""
    data = gb10_recording()
    load = phase_indices(data, "load")[0]
    assert not throttle_verdict(read(data, load)).throttled
    clamped = throttle_verdict(read(doctored(data, load, sm=1100), load))
    assert clamped.kinds == (STUCK_LOW,)
    assert clamped.short() == "clock stuck low · SM at 44 % of max"


def sampled(recording: dict[str, Any], index: int):
    nvml = RecordedNvml(recording).use(index)
    reader = NvmlReader(nvml, host_total_bytes=recording["host_mem_total_bytes"])
    return TelemetrySampler(
        memory=fixed_memory, pressure=FixedPressure(), gpu=reader, rails=lambda: ()
    ).sample()


def test_gpu_panel_rows_show_the_verdict_only_when_held_back() -> None:
    idle = {row.label: row for row in gpu_rows(sampled(RECORDING, 0))}
    assert "throttle" not in idle and idle["events"].level == ""
    snapshot = sampled(RECORDING, LOAD)
    assert throttle_kinds(snapshot.gpu) == (POWER_CAP,)
    loaded = {row.label: row for row in gpu_rows(snapshot)}
    share = snapshot.gpu.gpus[0].sm_clock_mhz / 1980
    assert loaded["throttle"].value == f"power cap · SM at {share * 100:.0f} % of max"
    assert loaded["throttle"].level == "warning" and loaded["events"].level == "warning"
    hot = {
        row.label: row
        for row in gpu_rows(
            sampled(
                doctored(RECORDING, LOAD, mask=BIT["HW thermal slowdown"] | BIT["HW slowdown"]),
                LOAD,
            )
        )
    }
    assert hot["throttle"].value.startswith("thermal") and hot["throttle"].level == "error"
    # sync boost is a clock event, not throttling: no warning (the old rule flagged it)
    boost = {
        row.label: row
        for row in gpu_rows(sampled(doctored(RECORDING, LOAD, mask=BIT["sync boost"]), LOAD))
    }
    assert boost["events"].level == "" and "throttle" not in boost


def test_telemetry_json_carries_each_gpus_throttle_kinds() -> None:
    assert sampled(RECORDING, 0).to_dict()["gpu"]["gpus"][0]["throttle"] == []
    data = sampled(RECORDING, LOAD).to_dict()
    assert data["gpu"]["gpus"][0]["throttle"] == ["power cap"]
    assert json.loads(json.dumps(data))["gpu"]["gpus"][0]["clock_event_reasons"] == ["SW power cap"]
