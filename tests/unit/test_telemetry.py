"""Telemetry: the spark_hwmon reader, the sampler on this machine's real /proc and on NVML
replays, the history window, the panels' words, and `sparkdeck telemetry`."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from sparkdeck.config.settings import GuardSettings
from sparkdeck.host.hwmon import HWMON_ROOT, HwmonError, PowerRail, read_spark_rails
from sparkdeck.host.meminfo import parse_meminfo
from sparkdeck.host.nvml import NvmlReader
from sparkdeck.host.psi import PRESSURE_MEMORY
from sparkdeck.telemetry.sampler import History, TelemetrySampler, TelemetrySnapshot
from sparkdeck.telemetry.view import (
    clock_spark_text,
    gpu_rows,
    memory_bars,
    pressure_rows,
    rail_rows,
    spark_text,
    text_report,
)
from tests.support.telemetry import GB10, H200, SPARK_MEMINFO, replay_sampler
from tools.record_nvml import RecordedNvml

# ----- spark_hwmon -------------------------------------------------------------------------


def fake_hwmon(
    root: Path, name: str, channels: dict[int, tuple[str, str]], caps: dict[int, str] | None = None
) -> Path:
    """A FAKE sysfs hwmon device (no Spark here): name, power*_label, power*_input in uW."""
    device = root / f"hwmon{len(list(root.glob('hwmon*')))}"
    device.mkdir(parents=True)
    (device / "name").write_text(name + "\n")
    for channel, (label, microwatts) in channels.items():
        (device / f"power{channel}_label").write_text(label + "\n")
        (device / f"power{channel}_input").write_text(microwatts + "\n")
    for channel, cap in (caps or {}).items():
        (device / f"power{channel}_cap").write_text(cap + "\n")
    return device


def test_spark_rails_from_a_fake_sysfs_tree(tmp_path: Path) -> None:
    fake_hwmon(tmp_path, "coretemp", {1: ("package", "5000000")})  # not the module's
    fake_hwmon(
        tmp_path,
        "spbm0",
        {
            1: ("gpu", "61200000"),
            2: ("dc_input", "97400000"),
            3: ("syspl1", "88000000"),
            4: ("prereg", "9100000"),
        },
        caps={3: "140000000"},
    )
    rails = read_spark_rails(tmp_path)
    assert rails == (
        PowerRail("spbm0", "gpu", 61.2),
        PowerRail("spbm0", "dc_input", 97.4),
        PowerRail("spbm0", "syspl1", 88.0, 140.0),
        PowerRail("spbm0", "prereg", 9.1),
    )


def test_a_broken_rail_is_an_error_not_a_smaller_total(tmp_path: Path) -> None:
    device = fake_hwmon(tmp_path, "spbm0", {1: ("gpu", "not a number")})
    with pytest.raises(HwmonError, match=str(device / "power1_input")):
        read_spark_rails(tmp_path)


def test_no_module_means_no_rails(tmp_path: Path) -> None:
    assert read_spark_rails(tmp_path / "absent") == ()
    fake_hwmon(tmp_path, "acpitz", {})
    assert read_spark_rails(tmp_path) == ()


def test_this_machines_real_hwmon() -> None:
    rails = read_spark_rails()
    spbm = (
        [
            d
            for d in HWMON_ROOT.glob("*")
            if (d / "name").is_file() and (d / "name").read_text().startswith("spbm")
        ]
        if HWMON_ROOT.is_dir()
        else []
    )
    assert bool(rails) == bool(spbm)  # here: no Spark, so nothing is shown


# ----- the sampler ---------------------------------------------------------------------------


def gpus_listed_by_nvidia_smi() -> int:
    """How many GPUs `nvidia-smi -L` lists here (0 without it or without a driver)."""
    if shutil.which("nvidia-smi") is None:
        return 0
    listed = subprocess.run(
        ["nvidia-smi", "-L"], capture_output=True, text=True, timeout=60, check=False
    )
    if listed.returncode != 0:
        return 0
    return sum(line.startswith("GPU ") for line in listed.stdout.splitlines())


def test_sampler_on_this_machines_real_proc() -> None:
    sampler = TelemetrySampler(gpu=NvmlReader())
    first, second = sampler.sample(), sampler.sample()
    assert first.memory is not None and first.memory_error is None
    assert 0 < first.memory.available <= first.memory.total
    if PRESSURE_MEMORY.exists():
        assert first.pressure is not None and first.pressure_rates is None  # needs two
        assert second.pressure_rates is not None
        assert 0.0 <= second.pressure_rates.some_pct <= 100.0
    else:
        assert first.pressure_error and "CONFIG_PSI" in first.pressure_error
    # What this machine has, asked of nvidia-smi: each GPU read without error, or none and
    # why (never an exception)
    listed = gpus_listed_by_nvidia_smi()
    if listed:
        assert (len(second.gpu.gpus), second.gpu.error) == (listed, None)
    else:
        assert second.gpu.gpus == ()
        assert (second.gpu.error or "").startswith("no NVIDIA driver (NVML: ")
    json.dumps(second.to_dict())


def test_sampler_without_driver_keeps_memory_and_pressure() -> None:
    class NoDriver:
        class NVMLError(Exception):
            pass

        def nvmlInit(self) -> None:  # noqa: N802 (the library's own name)
            raise self.NVMLError("Driver Not Loaded")

    snapshot = TelemetrySampler(
        memory=lambda: parse_meminfo(SPARK_MEMINFO), gpu=NvmlReader(NoDriver())
    ).sample()
    assert snapshot.memory is not None and snapshot.gpu.gpus == ()
    rows = gpu_rows(snapshot)
    assert rows[0].value == "no NVIDIA driver (NVML: Driver Not Loaded)"
    assert "no NVIDIA driver" in text_report(snapshot) and "available" in text_report(snapshot)


def test_gb10_replay_says_unified_and_na_never_zero() -> None:
    sampler = replay_sampler(GB10, 0, rails=True)
    sampler.sample()
    snapshot = sampler.sample()
    rows = {row.label: row.value for row in gpu_rows(snapshot)}
    assert rows["GPU"] == "0: NVIDIA GB10"
    assert rows["memory"].startswith("unified") and "121.7 GiB" in rows["memory"]
    assert rows["power"].endswith("(limit n/a)") and rows["fan"] == "n/a"
    assert not any(
        value.startswith("0 W") or (value == "0 %" and label == "fan")
        for label, value in rows.items()
    )
    assert [r.label.strip() for r in rail_rows(snapshot)] == [
        "rails",
        "gpu",
        "dc_input",
        "syspl1",
        "prereg",
    ]
    assert "cap 140 W" in rail_rows(snapshot)[3].value
    assert "  syspl1    88.0 W (cap 140 W)" in text_report(snapshot)


def test_h200_replay_shows_clocks_against_their_maxima_and_the_limit() -> None:
    nvml = RecordedNvml(H200)
    load = nvml.indices("load")[0]
    snapshot = replay_sampler(H200, load).sample()
    gpu = snapshot.gpu.gpus[0]
    rows = {row.label: row for row in gpu_rows(snapshot)}
    assert rows["SM"].value == f"{gpu.sm_clock_mhz} / {gpu.sm_clock_max_mhz} MHz"
    assert rows["power"].value == f"{gpu.power_w:.1f} W (limit {gpu.power_limit_w:.0f} W)"
    assert rows["memory"].value.endswith("140.4 GiB") and "unified" not in rows["memory"].value
    assert rows["P-state"].value == "P0"
    # Under load the H200 was held by its power cap: shown as a warning, not as idle.
    assert "SW power cap" in rows["events"].value and rows["events"].level == "warning"


# ----- history and the panels' words ---------------------------------------------------------


def _snapshot(t: float, used_kb: int) -> TelemetrySnapshot:
    text = SPARK_MEMINFO.replace("41943040", str(127615312 - used_kb))
    sampler = TelemetrySampler(
        memory=lambda: parse_meminfo(text),
        gpu=NvmlReader(RecordedNvml(GB10)),
        rails=lambda: (),
        clock=lambda: t,
    )
    return sampler.sample()


def test_history_keeps_five_minutes_by_time_whatever_the_rate() -> None:
    history = History(seconds=300)
    times = [i * 1.0 for i in range(200)] + [200 + i * 0.5 for i in range(400)]  # 1 Hz, 2 Hz
    for t in times:
        history.add(_snapshot(t, 1000))
    kept = history.values("memory_used_pct")
    assert 299.0 <= history.span("memory_used_pct") <= 300.0  # 5 min, never more
    assert len(kept) == sum(1 for t in times if t >= times[-1] - 300)
    frozen = history.frozen()
    history.add(_snapshot(times[-1] + 1, 2000))
    assert len(frozen["memory_used_pct"]) == len(kept)  # a copy, not a view


def test_a_sample_out_of_order_takes_its_place_and_the_sparkline_still_draws() -> None:
    """The service's feed and the window's own sampling overlap at a handover, so a sample
    older than the newest can come after it: the window then crashed with an IndexError in
    clock_spark_text (parallel run 35, test_ui_launch)."""
    history = History(seconds=300)
    for t in (1000.0, 1001.0, 1002.5, 1001.8, 1003.0):
        history.add(_snapshot(t, 1000))
    times = [t for t, _ in history.frozen()["memory_used_pct"]]
    assert times == sorted(times) == [1000.0, 1001.0, 1001.8, 1002.5, 1003.0]
    # the renderer takes whatever order it is handed, the newest by its time
    shuffled = [(1000.0, 50.0), (1002.9, 50.0), (1002.4, 100.0)]
    line = clock_spark_text(shuffled, 46, 100.0, 300.0)
    assert line == clock_spark_text(sorted(shuffled), 46, 100.0, 300.0) == " " * 45 + "█"


def test_memory_bars_warn_and_alarm_at_the_guard_thresholds() -> None:
    guard = GuardSettings()
    total_kb = 127615312
    for available_pct, level in ((33.0, "success"), (8.0, "warning"), (3.0, "error")):
        text = SPARK_MEMINFO.replace("41943040", str(int(total_kb * available_pct / 100)))
        bars = {bar.label: bar for bar in memory_bars(parse_meminfo(text), guard)}
        assert bars["available"].level == level
        assert abs(bars["available"].fraction - available_pct / 100) < 0.001
        assert abs(bars["used"].fraction + bars["available"].fraction - 1.0) < 1e-9


def test_pressure_table_marks_full_stalls() -> None:
    sampler = replay_sampler(GB10, 0)
    sampler.sample()
    rows = pressure_rows(sampler.sample(), GuardSettings(stop_full_rate_pct=0.1))
    now = next(row for row in rows if row.label == "now")
    assert now.value.split() == ["3.0", "0.2"] and now.level == "error"


def test_clock_spark_cells_are_stretches_of_the_clock_from_the_first_sample_on() -> None:
    # 300 s over 30 cells: 10 s a cell. Six samples a second apart fill one cell, not six
    # (spark_text would draw six: the line would grow a cell a second while history fills).
    ones = [(1000.0 + i, 50.0) for i in range(6)]
    assert clock_spark_text(ones, 30, 100.0, 300.0) == " " * 29 + "▄"
    # more samples in the same stretch: the same line, so the row repaints nothing
    assert clock_spark_text([*ones, (1009.0, 50.0)], 30, 100.0, 300.0) == " " * 29 + "▄"
    # the next stretch begins: the line moves on by one cell, no more
    assert clock_spark_text([*ones, (1010.0, 50.0)], 30, 100.0, 300.0) == " " * 28 + "▄▄"


def test_clock_spark_keeps_a_spike_in_its_cell_and_drops_what_is_older_than_the_span() -> None:
    points = [(float(t), 100.0 if t == 1003 else 0.0) for t in range(900, 1030)]
    line = clock_spark_text(points, 30, 100.0, 300.0)
    assert line.index("█") == 27 and line.count("█") == 1  # its stretch: 1000-1009 s
    moved = clock_spark_text([*points, (1030.0, 0.0)], 30, 100.0, 300.0)
    assert moved.index("█") == 26  # a whole cell on, as the clock moved a whole cell
    assert clock_spark_text(points, 2, 100.0, 20.0) == "▁▁"  # 1010-1029 s: the spike is older
    # cells shorter than the sampling period carry the cell before them: no holes
    sparse = [(1000.0 + 4 * i, 50.0) for i in range(10)]
    assert clock_spark_text(sparse, 40, 100.0, 40.0).strip() == "▄" * 37


def test_spark_text_uses_a_fixed_scale_and_keeps_spikes() -> None:
    assert spark_text([3.3, 3.4, 3.3], 5, 100.0) == "  ▁▁▁"
    assert spark_text([0.0, 50.0, 100.0], 3, 100.0) == "▁▄█"
    spiky = [0.0] * 99 + [100.0]
    assert spark_text(spiky, 10, 100.0)[-1] == "█"  # one high sample survives the binning


# ----- the command ---------------------------------------------------------------------------


def sparkdeck(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "sparkdeck", *args], capture_output=True, text=True, timeout=60
    )


def test_telemetry_command_json_samples() -> None:
    result = sparkdeck("telemetry", "--json", "--samples", "2")
    assert result.returncode == 0, result.stderr
    samples = [json.loads(line) for line in result.stdout.splitlines()]
    assert len(samples) == 2
    first, second = samples
    assert second["taken_at"] - first["taken_at"] >= 0.9
    assert first["memory"]["total"] > 0 and first["memory"]["used"] == (
        first["memory"]["total"] - first["memory"]["available"]
    )
    if PRESSURE_MEMORY.exists():
        assert first["pressure_rates"] is None and second["pressure_rates"] is not None
    assert second["gpu"]["gpus"] or second["gpu"]["error"]


def test_telemetry_command_text_and_bad_count() -> None:
    result = sparkdeck("telemetry")
    assert result.returncode == 0
    assert result.stdout.splitlines()[0] == "memory" and "available" in result.stdout
    assert "\ngpu\n" in result.stdout
    bad = sparkdeck("telemetry", "--samples", "0")
    assert bad.returncode == 1 and bad.stderr.strip() == (
        "sparkdeck: --samples must be at least 1, not 0"
    )


def test_the_sampler_and_the_watchdog_wake_together_on_the_machines_ticks():
    """The telemetry sampler (the service's, or a window's own) and the guard's watchdog
    wake on whole seconds of the monotonic clock, however far apart they started, so their
    events reach a window together and are drawn in one frame (sparkdeck.host.ticks): real
    loops on this machine's /proc, started 0.45 s apart (0.1 s allowed for a loaded host's
    scheduler; apart, they would stay 0.45 s off)."""
    import threading
    import time

    from sparkdeck.guard.policy import WatchdogPolicy
    from sparkdeck.guard.readings import HostReadings
    from sparkdeck.guard.watchdog import Watchdog
    from sparkdeck.host.ticks import until_next_tick

    assert until_next_tick(1.0, now=10.25) == pytest.approx(0.75)
    assert until_next_tick(1.0, since=10.9, now=10.95) == pytest.approx(1.05)  # not at 11.0
    assert until_next_tick(0.5, since=10.0, now=10.2) == pytest.approx(0.3)

    sampled: list[float] = []
    read: list[float] = []
    readings = HostReadings()

    def reading():
        read.append(time.monotonic())
        return readings()

    stop = threading.Event()
    sampler = threading.Thread(
        target=TelemetrySampler(gpu=NvmlReader()).run,
        args=(History(), lambda: 1.0, lambda *_: sampled.append(time.monotonic()), stop),
    )
    settings = GuardSettings(stop_available_pct=0.0, warn_available_pct=0.0)  # never acts
    dog = Watchdog(
        WatchdogPolicy(settings), reading, lambda: None, engine="t", record=lambda *a, **k: None
    )
    watchdog = threading.Thread(target=dog.run, args=(stop, lambda: 1.0))
    sampler.start()
    time.sleep(0.45)
    watchdog.start()
    time.sleep(3.2)
    stop.set()
    sampler.join(5)
    watchdog.join(5)
    # after each loop's own first turn, both on the same whole seconds
    ticks = read[1:]
    assert len(ticks) >= 2 and len(sampled) >= 3, (sampled, read)
    for t in ticks:
        assert min(abs(t - s) for s in sampled[1:]) < 0.1, (sampled, read)
        assert min(t % 1.0, 1.0 - t % 1.0) < 0.1, t
