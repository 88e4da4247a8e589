"""`sparkdeck bench` as a user runs it, against the timed loopback server, and a watchdog
stop that ends a run with a clear record."""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

import sparkdeck.bench.runner as runner_module
import sparkdeck.bench.target as target_module
from sparkdeck import cli
from sparkdeck.bench.sampler import ResourceSampler
from sparkdeck.bench.store import BenchStore
from sparkdeck.guard.readings import HostReadings
from sparkdeck.guard.records import recent_actions
from sparkdeck.host.meminfo import MemInfoError, MemorySnapshot
from tests.support.timed_server import running

GIB = 2**30


@pytest.fixture
def server() -> Iterator[str]:
    with running("usage_end", 20000.0, 200.0) as url:
        yield url


def sparkdeck(*args: str, env_dirs: dict[str, Path]) -> subprocess.CompletedProcess:
    env = {
        **os.environ,
        "SPARKDECK_DATA_DIR": str(env_dirs["data"]),
        "SPARKDECK_CONFIG_DIR": str(env_dirs["config"]),
        "SPARKDECK_SCOPE": "t" + uuid.uuid4().hex[:10],
    }  # never sees anyone's engine
    return subprocess.run(
        [sys.executable, "-m", "sparkdeck", *args],
        capture_output=True,
        text=True,
        timeout=240,
        env=env,
    )


def test_bench_json_history_and_export(
    server: str, isolated_dirs: dict[str, Path], tmp_path: Path
) -> None:
    done = sparkdeck(
        "bench",
        "--endpoint",
        server,
        "--kind",
        "openai",
        "--concurrency",
        "1,2",
        "--runs",
        "2",
        "--prompt-tokens",
        "300",
        "--output-tokens",
        "40",
        "--json",
        env_dirs=isolated_dirs,
    )
    assert done.returncode == 0, done.stderr
    assert done.stderr == ""  # no progress lines mixed into a --json run
    run = json.loads(done.stdout)
    assert run["status"] == "complete" and run["fingerprint"]["kind"] == "openai"
    assert run["fingerprint"]["model"] == "timed-model"
    assert [p["concurrency"] for p in run["points"]] == [1, 2]
    # short replies here (0.2 s of decode): the plumbing is checked, precision is
    # test_bench_accuracy's business
    assert run["points"][1]["decode_tps"] == pytest.approx(200.0, rel=0.1)
    assert run["prompt_plan"]["total_tokens"] == 300
    assert run["peaks"]["samples"] >= 2 and run["peaks"]["min_available_bytes"] > 0

    shown = sparkdeck(
        "bench",
        "--endpoint",
        server,
        "--kind",
        "openai",
        "--concurrency",
        "3",
        "--runs",
        "1",
        "--output-tokens",
        "20",
        env_dirs=isolated_dirs,
    )
    assert shown.returncode == 0, shown.stderr
    assert "bench: concurrency 3, run 1" in shown.stderr and "bench: done" in shown.stderr
    assert "decode tok/s/req" in shown.stdout and "saved as run 2" in shown.stdout

    history = json.loads(sparkdeck("bench", "history", "--json", env_dirs=isolated_dirs).stdout)
    assert [r["id"] for r in history["runs"]] == [2, 1]
    out = tmp_path / "runs.csv"
    exported = sparkdeck("bench", "export", "csv", "-o", str(out), env_dirs=isolated_dirs)
    assert exported.returncode == 0, exported.stderr
    rows = list(csv.DictReader(out.open()))
    assert [(r["run_id"], r["concurrency"]) for r in rows] == [("2", "3"), ("1", "1"), ("1", "2")]


def test_bench_without_a_target_says_what_to_do(isolated_dirs: dict[str, Path]) -> None:
    # a scope of its own and empty dirs: no managed engine, nothing attached
    done = sparkdeck("bench", "--runs", "1", env_dirs=isolated_dirs)
    assert done.returncode == 1
    assert "no engine to benchmark" in done.stderr and "--endpoint URL" in done.stderr


def test_bad_levels_are_a_usage_error(isolated_dirs: dict[str, Path]) -> None:
    done = sparkdeck("bench", "--concurrency", "1,x", env_dirs=isolated_dirs)
    assert done.returncode == 2 and "give levels like 1,2,4,8" in done.stderr


class FakeSparkMemory:
    """A fake: a 128 GiB Spark whose MemAvailable collapses `healthy_s` seconds in (no Spark
    here, and the test must not starve the real machine of memory)."""

    def __init__(self, healthy_s: float):
        self.until = time.monotonic() + healthy_s

    def __call__(self) -> MemorySnapshot:
        available = 60 * GIB if time.monotonic() < self.until else 3 * GIB
        return MemorySnapshot(128 * GIB, available, available, 0, 0, 0, 0)


def test_the_guards_watchdog_stops_a_run_with_a_clear_record(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    with running("usage_end", 20000.0, 50.0) as url:
        fake = FakeSparkMemory(healthy_s=1.5)
        # the guard's own watchdog and the run's sampler both read the fake
        monkeypatch.setattr(target_module, "HostReadings", lambda: HostReadings(read_memory=fake))
        monkeypatch.setattr(
            runner_module, "ResourceSampler", lambda hz: ResourceSampler(hz, read_memory=fake)
        )
        began = time.monotonic()
        code = cli.main(
            [
                "bench",
                "--endpoint",
                url,
                "--kind",
                "openai",
                "--concurrency",
                "1",
                "--runs",
                "3",
                "--warmup",
                "0",
                "--output-tokens",
                "400",
            ]
        )
        took = time.monotonic() - began
        log = httpx.get(url + "/log").json()
    err = capsys.readouterr().err
    assert code == 1
    assert "benchmark stopped: memory watchdog: MemAvailable 2.3 % < 5 %" in err
    assert "saved as run 1" in err
    # 3 runs of 400 tokens at 50 tok/s would take 24 s; the stop came at ~2 s (the guard
    # reads once a second) and the reply in flight was aborted, not waited for
    assert took < 8 and log == []
    [run] = BenchStore().runs()
    assert run.status == "stopped" and "MemAvailable" in run.reason
    assert run.peaks["min_available_bytes"] == 3 * GIB and run.finished_at
    # the guard kept its own record of the decision, as for any engine it watches
    # (the decision first, written before the stop was tried, then the outcome)
    stopped, action = recent_actions()
    assert (stopped["action"], action["action"]) == ("stopped", "stopping")
    assert action["engine"] == url.split("//")[1]


def test_a_watchdog_that_cannot_read_the_host_ends_the_run(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    def broken() -> MemorySnapshot:
        raise MemInfoError("/proc/meminfo lacks MemAvailable")  # a kernel that hides it

    with running("usage_end", 20000.0, 50.0) as url:
        monkeypatch.setattr(target_module, "HostReadings", lambda: HostReadings(read_memory=broken))
        code = cli.main(
            [
                "bench",
                "--endpoint",
                url,
                "--kind",
                "openai",
                "--concurrency",
                "1",
                "--runs",
                "2",
                "--warmup",
                "0",
                "--output-tokens",
                "200",
            ]
        )
    assert code == 1
    assert (
        "benchmark stopped: memory watchdog failed: /proc/meminfo lacks MemAvailable"
        in capsys.readouterr().err
    )
    [run] = BenchStore().runs()
    assert run.status == "stopped" and run.reason.startswith("memory watchdog failed")
