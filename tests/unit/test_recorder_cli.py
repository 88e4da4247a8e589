"""`sparkdeck history` as a user runs it (a real subprocess of the CLI), reading a recording
that a real recorder wrote from real /proc samples of this machine; the post-mortem comes from
a recording process killed with SIGKILL, and the pure verdicts from labelled fake rows."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from sparkdeck.config.settings import GuardSettings
from sparkdeck.recorder import FlightRecorder
from sparkdeck.recorder.postmortem import judge
from sparkdeck.recorder.rows import RecordedSample
from sparkdeck.recorder.store import default_path
from sparkdeck.telemetry.sampler import TelemetrySampler
from tests.support.recording_child import child

GIB = 2**30
SPARK_TOTAL = 127615312 * 1024  # a Spark's MemTotal (~121.7 GiB): FAKE rows below use it


def sparkdeck(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "sparkdeck", *args],
        capture_output=True,
        text=True,
        timeout=120,
        env=os.environ.copy(),
    )


def record_real(count: int, state: str) -> None:
    recorder, _ = FlightRecorder.open(default_path())
    sampler = TelemetrySampler()
    for _ in range(count):
        recorder.record(sampler.sample(), state, 3.5)
        time.sleep(0.1)
    recorder.close()


def test_history_without_a_recording_says_where_it_looked() -> None:
    done = sparkdeck("history")
    assert done.returncode == 1
    assert f"no flight recording at {default_path()}" in done.stderr


def test_history_shows_the_window_and_json_carries_every_row() -> None:
    record_real(40, "tiny-llama running")
    shown = sparkdeck("history", "--since", "10m", "--lines", "10")
    assert shown.returncode == 0, shown.stderr
    lines = shown.stdout.splitlines()
    assert lines[0].startswith("40 readings from ") and "worst of ~4 readings" in lines[0]
    assert lines[1].split()[:3] == ["time", "available", "avail"]
    table = [line for line in lines if "tiny-llama running" in line and line.endswith("3.5")]
    assert len(table) == 10
    assert any(line.startswith("lowest MemAvailable ") for line in lines)
    as_json = sparkdeck("history", "--since", "1h", "--json")
    rows = json.loads(as_json.stdout)["rows"]
    assert len(rows) == 40 and rows[0]["engine_state"] == "tiny-llama running"
    assert rows[0]["mem_total"] > 0 and rows[0]["tok_s"] == 3.5
    assert sparkdeck("history", "--since", "soon").returncode == 1


def test_last_crash_after_a_kill_9() -> None:
    proc = child(default_path())
    assert proc.stdout is not None
    for _ in range(4):
        proc.stdout.readline()
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(timeout=10)
    clean = sparkdeck("history", "--last-crash")
    assert "no unclean end on record" in clean.stdout  # not judged until the next start
    recorder, postmortem = FlightRecorder.open(default_path())
    recorder.close()
    assert postmortem is not None
    shown = sparkdeck("history", "--last-crash")
    assert shown.returncode == 0, shown.stderr
    assert "did not end cleanly" in shown.stdout and "killed or crashed" in shown.stdout
    assert f"verdict: {postmortem.verdict}" in shown.stdout
    data = json.loads(sparkdeck("history", "--last-crash", "--json").stdout)
    assert data["postmortem"]["verdict"] == postmortem.verdict
    assert Path(data["file"]).is_file()


def at(clock: str) -> float:
    """Today's local time `clock` (HH:MM:SS) as epoch seconds."""
    day = time.strftime("%Y-%m-%d")
    return time.mktime(time.strptime(f"{day} {clock}", "%Y-%m-%d %H:%M:%S"))


def row(
    clock: str,
    available_gib: float,
    full: float = 0.0,
    state: str | None = None,
    throttle: str | None = None,
    some: float = 0.0,
) -> RecordedSample:
    """FAKE: a Spark-sized row (no Spark here)."""
    return RecordedSample(
        t=at(clock),
        mem_total=SPARK_TOTAL,
        mem_available=int(available_gib * GIB),
        psi_full_avg10=full,
        psi_full_rate=full,
        psi_some_avg10=some,
        engine_state=state,
        throttle=throttle,
        swap_total=0,
        swap_free=0,
    )


def test_verdicts_in_plain_words() -> None:
    ran_out = judge(
        [
            row("21:13:50", 30.0, state="vllm-ngc starting"),
            row("21:14:07", 0.4, 63.0, "vllm-ngc starting"),
            row("21:14:08", 0.9, 40.0, "vllm-ngc starting"),
        ],
        at("21:00:00"),
        True,
    )
    assert ran_out.verdict == (
        "memory ran out: MemAvailable 0.4 GiB and PSI full 63 % at "
        "21:14:07, engine vllm-ngc starting"
    )
    assert ran_out.memory == "ran out" and ran_out.rebooted
    normal = judge(
        [row("09:00:00", 60.0, state="llama running"), row("09:00:01", 61.0)], at("08:00:00"), False
    )
    assert normal.verdict == (
        "no memory trouble recorded; the last reading was normal "
        "(MemAvailable 61.0 GiB and PSI full 0 % at 09:00:01, no engine "
        "running)"
    )
    tight = judge([row("10:00:00", 9.0, some=14.0, state="sglang running")], 0.0, False)
    assert tight.memory == "tight" and tight.verdict.startswith("memory was tight but did not")
    # full stall alone counts as running out, even with memory left (thrashing)
    stall = judge([row("10:00:00", 20.0, full=12.0)], 0.0, False)
    assert stall.memory == "ran out"
    assert judge([], 0.0, True).verdict.startswith("nothing was recorded")


def test_only_the_last_ten_minutes_count_and_throttling_is_named() -> None:
    rows = [
        row("12:00:00", 0.2, 80.0, "old trouble"),  # 15 min before the end: outside
        row("12:10:00", 50.0, throttle="thermal"),
        row("12:14:00", 50.0, throttle="thermal,power cap"),
        row("12:15:00", 50.0, state="vllm running"),
    ]
    verdict = judge(rows, 0.0, False, GuardSettings())
    assert verdict.memory == "normal" and verdict.rows == 3
    assert verdict.throttle == ("thermal", "power cap") and verdict.throttled_rows == 2
    assert verdict.verdict.endswith(
        "the GPU was throttled (thermal, power cap) in 2 of 3 readings, the last at 12:14:00"
    )


def test_a_lone_stuck_clock_row_is_a_ramp_up_not_throttling() -> None:
    rows = [
        row("12:00:00", 50.0),
        row("12:00:01", 50.0, throttle="clock stuck low"),
        row("12:00:02", 50.0),
        row("12:00:03", 50.0, throttle="clock stuck low"),
        row("12:00:04", 50.0, throttle="clock stuck low"),
    ]
    verdict = judge(rows, 0.0, False)
    assert verdict.throttled_rows == 1 and verdict.throttle == ("clock stuck low",)
