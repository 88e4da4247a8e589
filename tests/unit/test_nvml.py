"""The NVML reader against a real H200's answers, a GB10-shaped fixture, and no driver at all.

tests/fixtures/nvml/h200_idle_load.json is a recording from a real NVIDIA H200 (driver 580)
made by tools/record_nvml.py: ten samples idle, ten under a torch matmul load; beside it,
nvidia_smi_q.xml is `nvidia-smi -q -x` from the same run, taken with the load still running.
gb10_written.json is written by hand from SPARK.md (no GB10 was at hand); its "_note" says so.
"""

from __future__ import annotations

import copy
import json
import statistics
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from sparkdeck.host.nvml import (
    CLOCK_EVENT_REASONS,
    GpuReading,
    NvmlReader,
    decode_clock_event_reasons,
)
from tests.conftest import unavailable
from tests.support.telemetry import replay

FIXTURES = Path(__file__).parents[1] / "fixtures" / "nvml"
H200 = FIXTURES / "h200_idle_load.json"
SMI = FIXTURES / "nvidia_smi_q.xml"
GB10 = FIXTURES / "gb10_written.json"
MIB = 2**20

# nvidia-smi's XML tag for each clock-event reason the reader names (the H200 lists these 9).
SMI_REASON_TAGS = {
    "idle": "gpu_idle",
    "applications clocks setting": "applications_clocks_setting",
    "SW power cap": "sw_power_cap",
    "HW slowdown": "hw_slowdown",
    "HW thermal slowdown": "hw_thermal_slowdown",
    "HW power brake slowdown": "hw_power_brake_slowdown",
    "sync boost": "sync_boost",
    "SW thermal slowdown": "sw_thermal_slowdown",
    "display clock setting": "display_clocks_setting",
}


@pytest.fixture(scope="module")
def h200() -> list[tuple[str, GpuReading]]:
    return replay(H200)[1]


@pytest.fixture(scope="module")
def smi() -> ET.Element:
    gpu = ET.parse(SMI).getroot().find("gpu")
    assert gpu is not None
    return gpu


def number(text: str | None) -> float:
    """'143771 MiB' -> 143771.0, '700.00 W' -> 700.0"""
    assert text is not None
    return float(text.split()[0])


def phase(readings: list[tuple[str, GpuReading]], name: str) -> list[GpuReading]:
    return [r for p, r in readings if p == name]


def test_h200_recording_is_labelled_as_recorded():
    data = json.loads(H200.read_text())
    assert "Recorded" in data["_note"] and data["machine"]["load"].startswith("torch")
    assert len(phase([(s["phase"], s) for s in data["samples"]], "idle")) == 10
    assert len(phase([(s["phase"], s) for s in data["samples"]], "load")) == 10


def test_h200_fixed_facts_agree_with_nvidia_smi(h200, smi):
    root = ET.parse(SMI).getroot()
    for _, reading in h200:
        assert reading.ok and not reading.unified_memory and len(reading.gpus) == 1
        gpu = reading.gpus[0]
        assert gpu.name == smi.findtext("product_name") == "NVIDIA H200"
        assert gpu.uuid == smi.findtext("uuid")
        assert gpu.driver_version == root.findtext("driver_version")
        assert gpu.sm_clock_max_mhz == number(smi.findtext("max_clocks/sm_clock"))
        assert gpu.mem_clock_max_mhz == number(smi.findtext("max_clocks/mem_clock"))
        limit = number(smi.findtext("gpu_power_readings/current_power_limit"))
        assert gpu.power_limit_w is not None and abs(gpu.power_limit_w - limit) <= 1.0
        total = number(smi.findtext("fb_memory_usage/total")) * MIB
        assert gpu.memory_total is not None and abs(gpu.memory_total - total) <= MIB
        # The H200 has no fan of its own: NVML says NOT_SUPPORTED and nvidia-smi "N/A".
        assert smi.findtext("fan_speed") == "N/A" and gpu.fan_percent is None
        assert gpu.errors == ()


def test_h200_load_raises_clocks_utilisation_and_power(h200):
    idle = [r.gpus[0] for r in phase(h200, "idle")]
    load = [r.gpus[0] for r in phase(h200, "load")]
    assert max(g.sm_clock_mhz for g in idle) < min(g.sm_clock_mhz for g in load)
    assert max(g.utilisation_gpu for g in idle) < min(g.utilisation_gpu for g in load)
    assert statistics.median(g.power_w for g in idle) < statistics.median(g.power_w for g in load)
    assert all(g.clock_event_reasons == ("idle",) for g in idle)
    assert all(g.processes == () for g in idle)
    assert all(len(g.processes) == 1 for g in load)


def test_h200_last_load_sample_agrees_with_nvidia_smi_taken_right_after(h200, smi):
    gpu = phase(h200, "load")[-1].gpus[0]
    # memory_used is NVML's v2 "used": nvidia-smi's figure, without the 616 MiB reservation.
    used = number(smi.findtext("fb_memory_usage/used")) * MIB
    assert gpu.memory_used is not None and abs(gpu.memory_used - used) <= MIB
    [(pid, proc_bytes)] = gpu.processes
    assert pid == int(smi.findtext("processes/process_info/pid") or 0)
    assert abs(proc_bytes - number(smi.findtext("processes/process_info/used_memory")) * MIB) <= MIB
    active = {
        el.tag.removeprefix("clocks_event_reason_")
        for el in smi.find("clocks_event_reasons")
        if el.text == "Active"
    }
    assert {SMI_REASON_TAGS[name] for name in gpu.clock_event_reasons} == active
    assert gpu.pstate == int(smi.findtext("performance_state").removeprefix("P"))
    average = number(smi.findtext("gpu_power_readings/average_power_draw"))
    assert gpu.power_w == pytest.approx(average, rel=0.05)


def test_h200_replay_asks_only_for_what_was_recorded_and_inits_once():
    nvml, _ = replay(H200)
    assert nvml.calls.count("nvmlInit()") == 1
    assert nvml.calls[-1] == "nvmlShutdown()"
    # v2 answered, so the reader never fell back to v1 (whose "used" counts the reservation).
    assert "nvmlDeviceGetMemoryInfo(gpu0)" not in nvml.calls


def test_the_five_percent_rule_marks_an_nvml_total_that_is_host_ram(h200):
    total = h200[0][1].gpus[0].memory_total
    assert replay(H200, host_total=int(total * 1.04))[1][0][1].unified_memory
    assert not replay(H200, host_total=int(total * 1.10))[1][0][1].unified_memory


def test_gb10_fixture_is_labelled_as_written():
    assert "WRITTEN BY HAND, NOT RECORDED" in json.loads(GB10.read_text())["_note"]


def test_gb10_unsupported_fields_are_none_never_zero():
    for _, reading in replay(GB10)[1]:
        assert reading.ok and reading.unified_memory
        gpu = reading.gpus[0]
        assert gpu.name == "NVIDIA GB10"
        for field in ("memory_total", "memory_used", "power_limit_w", "fan_percent"):
            assert getattr(gpu, field) is None, field
        assert isinstance(gpu.power_w, float) and gpu.power_w > 0
        assert gpu.sm_clock_mhz and gpu.temperature_c and gpu.utilisation_gpu is not None
        assert gpu.processes == ((41234, 96 * 2**30),)
        assert gpu.errors == ()  # NOT_SUPPORTED is a fact of the chip, not a problem
    load = replay(GB10)[1][1][1].gpus[0]
    assert load.pstate == 0 and load.clock_event_reasons == () and load.utilisation_gpu == 96


def test_gb10_driver_that_reports_memtotal_is_still_unified():
    # Some drivers answer memory info on a GB10 with MemTotal instead of NOT_SUPPORTED.
    data = json.loads(GB10.read_text())
    host = data["host_mem_total_bytes"]
    for sample in data["samples"]:
        sample["calls"]["nvmlDeviceGetMemoryInfo(gpu0, version=33554472)"] = {
            "__struct__": "c_nvmlMemory_v2_t",
            "version": 33554472,
            "total": host - 3 * MIB,
            "reserved": 0,
            "free": host // 3,
            "used": host - host // 3,
        }
    for _, reading in replay(data)[1]:
        assert reading.unified_memory and reading.gpus[0].memory_total == host - 3 * MIB


def test_errors_other_than_not_supported_are_reported():
    data = copy.deepcopy(json.loads(GB10.read_text()))
    lost = {"__error__": "NVML_ERROR_GPU_IS_LOST", "code": 15, "message": "GPU is lost"}
    data["samples"][1]["calls"]["nvmlDeviceGetPowerUsage(gpu0)"] = lost
    (_, idle), (_, load) = replay(data)[1]
    assert idle.gpus[0].errors == ()
    assert load.gpus[0].power_w is None and load.gpus[0].errors == ("power_w: GPU is lost",)
    data["samples"][1]["calls"]["nvmlDeviceGetHandleByIndex(0)"] = lost
    (_, load_without_gpu) = replay(data)[1][1]
    assert load_without_gpu.gpus == () and load_without_gpu.error == "GPU 0: GPU is lost"


def test_clock_event_reasons_decode():
    assert decode_clock_event_reasons(0) == ()
    assert decode_clock_event_reasons(0x5) == ("idle", "SW power cap")
    assert decode_clock_event_reasons(0x1004) == ("SW power cap", "unknown (0x1000)")
    assert set(SMI_REASON_TAGS) <= {name for _, name in CLOCK_EVENT_REASONS}


def test_no_driver_gives_a_reading_with_an_error_not_an_exception():
    try:
        import pynvml  # nvidia-ml-py is a dependency: missing is a broken install, not a skip
    except ImportError:
        unavailable("pynvml (nvidia-ml-py) is not importable")
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError_LibraryNotFound:
        pass
    else:
        pynvml.nvmlShutdown()
        # Not a missing part: this test is about hosts WITHOUT a driver (CI's); a GPU host
        # cannot be one. The recorded H200 readings above cover hosts with a driver.
        pytest.skip("this machine has an NVIDIA driver")
    for reader in (NvmlReader(pynvml), NvmlReader()):
        first, second = reader.read(), reader.read()
        for reading in (first, second):
            assert reading.gpus == () and not reading.ok and not reading.unified_memory
            assert reading.error == "no NVIDIA driver (NVML: NVML Shared Library Not Found)"
        reader.close()


def test_importing_the_reader_does_not_load_textual():
    code = "import sys, sparkdeck.host.nvml\nassert 'textual' not in sys.modules\nprint('ok')\n"
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0 and result.stdout.strip() == "ok", result.stderr
