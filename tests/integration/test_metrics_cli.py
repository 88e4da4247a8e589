"""`sparkdeck metrics` as a user runs it, the bytes_per_token preset field, and the reader's
typed outcomes against real sockets on loopback (no Docker needed)."""

from __future__ import annotations

import itertools
import json
import time
from pathlib import Path

import pytest

from sparkdeck.engines import get_kind
from sparkdeck.metrics.reader import (
    InvalidSample,
    MetricsOff,
    MetricsReader,
    MetricsTarget,
    RawSample,
    Unreachable,
)
from sparkdeck.metrics.sampler import MetricsSampler
from sparkdeck.presets import PresetError, load_file
from tests.conftest import free_port, write_preset
from tests.support.cli import run_cli
from tests.support.metrics_loopback import serving

LLAMA_BODY = Path(__file__).parents[1] / "fixtures" / "metrics" / "llamacpp-b11434-busy.prom"


ROUTES: dict[str, tuple[int, bytes]] = {}


@pytest.fixture
def server():
    ROUTES.clear()
    with serving(lambda path: ROUTES.get(path, (404, b"not found"))) as url:
        yield url


@pytest.mark.anyio
async def test_reader_outcomes_are_typed(server):
    ROUTES.update(
        {
            "/ok": (200, LLAMA_BODY.read_bytes()),
            "/off": (501, b"off"),
            "/bad": (200, b"\xff\xfe"),
            "/err": (500, b"boom"),
        }
    )
    closed = f"http://127.0.0.1:{free_port()}"  # a port nobody listens on

    async def scrape_all():
        reader = MetricsReader()
        try:
            return [
                await reader.scrape(MetricsTarget(url, "llamacpp", off_hint="turn it on"))
                for url in (
                    server + "/ok",
                    server + "/off",
                    server + "/bad",
                    server + "/err",
                    closed + "/metrics",
                )
            ]
        finally:
            await reader.aclose()

    ok, off, bad, err, refused = await scrape_all()
    assert isinstance(ok, RawSample) and ok.families["llamacpp:requests_processing"].total() == 2
    assert isinstance(off, MetricsOff) and off.hint == "turn it on" and off.status_code == 501
    assert isinstance(bad, InvalidSample) and "UTF-8" in bad.reason
    assert isinstance(err, Unreachable) and "HTTP 500" in err.reason
    assert isinstance(refused, Unreachable) and "ConnectError" in refused.reason


def test_cli_json_lines_from_an_endpoint(server):
    ROUTES.update({"/metrics": (200, LLAMA_BODY.read_bytes())})
    done = run_cli(
        "metrics",
        "--endpoint",
        server,
        "--kind",
        "llamacpp",
        "--json",
        "--samples",
        "3",
        "--interval",
        "0.2",
    )
    assert done.returncode == 0, done.stderr
    lines = [json.loads(line) for line in done.stdout.splitlines()]
    assert len(lines) == 3
    assert [line["running"] for line in lines] == [2, 2, 2]
    assert lines[0]["generation_tps"] is None and lines[2]["generation_tps"] == 0.0
    assert lines[1]["wall"] - lines[0]["wall"] == pytest.approx(0.2, abs=0.15)


def test_cli_human_output_and_failures(server):
    ROUTES.update({"/metrics": (200, LLAMA_BODY.read_bytes())})
    done = run_cli("metrics", "--endpoint", server, "--kind", "llamacpp", "--samples", "1")
    assert done.returncode == 0 and "running 2  waiting 2" in done.stdout
    assert "KV n/a" in done.stdout  # llama-server does not report it: n/a, never 0

    custom = run_cli("metrics", "--endpoint", server, "--kind", "openai", "--samples", "1")
    assert custom.returncode == 1 and "metrics_map" in custom.stderr
    assert run_cli("metrics", "--endpoint", server, "--samples", "0").returncode == 1
    unknown = run_cli("metrics", "--endpoint", f"http://127.0.0.1:{free_port()}", "--samples", "1")
    assert unknown.returncode == 1 and "nothing answers" in unknown.stderr


@pytest.mark.docker
def test_cli_without_an_engine_says_so(isolated_dirs, docker_client, monkeypatch):
    monkeypatch.setenv("SPARKDECK_SCOPE", "t-metrics-none")
    done = run_cli("metrics", "--samples", "1")
    assert done.returncode == 1
    assert "no engine to read metrics from" in done.stderr and "--endpoint" in done.stderr
    assert "sparkdeck attach URL" in done.stderr


def _preset_fields(**extra):
    return {"title": "t", "kind": "vllm", "image": "x", "model": "m", **extra}


def test_bytes_per_token_is_validated_and_reaches_the_plan(tmp_path):
    preset = load_file(write_preset(tmp_path, "bpt", **_preset_fields(bytes_per_token=4.6e9)))
    assert preset.bytes_per_token == 4.6e9
    plan = get_kind("vllm").metrics_plan("http://127.0.0.1:8000", "/metrics", preset)
    assert plan.bytes_per_token == 4.6e9 and plan.target.url.endswith(":8000/metrics")
    for bad, fragment in (
        (0, "out of range"),
        (-5.0, "out of range"),
        ("4 GB", "a number"),
        (2e13, "ceiling"),
    ):
        path = write_preset(tmp_path, "bad", **_preset_fields(bytes_per_token=bad))
        with pytest.raises(PresetError) as info:
            load_file(path)
        assert f"{path}: bytes_per_token:" in str(info.value) and fragment in str(info.value)


def test_custom_engine_metrics_map_is_checked(tmp_path):
    fields = {
        "title": "t",
        "kind": "openai",
        "image": "x",
        "openai": {
            "container_port": 9000,
            "metrics_path": "/metrics",
            "metrics_map": {"tokens": "a_total", "running": "b c"},
        },
    }
    with pytest.raises(PresetError) as info:
        load_file(write_preset(tmp_path, "custom", **fields))
    text = str(info.value)
    assert "openai.metrics_map: 'tokens' is not a metric sparkdeck reads" in text
    assert "running = 'b c' is not a metric name" in text


@pytest.mark.anyio
async def test_a_slow_scrape_is_not_followed_by_a_burst():
    """One scrape overruns three ticks; the next samples keep the cadence, not catch up."""
    delays = [0.7]

    def respond(path: str) -> tuple[int, bytes]:
        time.sleep(delays.pop() if delays else 0.0)
        return 200, LLAMA_BODY.read_bytes()

    async def sample(url: str) -> list[float]:
        reader = MetricsReader()
        walls: list[float] = []
        try:
            sampler = MetricsSampler(get_kind("llamacpp").metrics_plan(url, "/metrics"), reader)
            await sampler.run(lambda m: walls.append(m.wall), samples=4, period_s=0.2)
        finally:
            await reader.aclose()
        return walls

    with serving(respond) as url:
        walls = await sample(url)
    gaps = [b - a for a, b in itertools.pairwise(walls)]
    # The slow scrape is given up at 0.5 s; the next tick on the 0.2 s grid is at 0.6 s, so
    # the first gap is nominally 0.1 s and the rest 0.2 s. A catch-up burst would put the
    # missed ticks a few ms apart: a quarter period cleanly tells the two apart.
    assert min(gaps) >= 0.05, gaps
    assert all(abs(gap - 0.2) < 0.05 for gap in gaps[1:]), gaps


def test_sglang_without_enable_metrics_gets_the_flag_not_zeros(server):
    # SGLang has no /metrics route without --enable-metrics: the loopback server answers 404.
    done = run_cli("metrics", "--endpoint", server, "--kind", "sglang", "--samples", "1", "--json")
    (line,) = [json.loads(text) for text in done.stdout.splitlines()]
    assert done.returncode == 0 and line["status"] == "metrics-off"
    assert "--enable-metrics" in line["reason"]
    assert line["generation_tps"] is None and line["running"] is None
