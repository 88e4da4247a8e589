"""sparkdeck's engine numbers against a real llama-server container under streamed load."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from sparkdeck.engines import get_kind
from sparkdeck.launch.sequence import Launcher
from sparkdeck.metrics.reader import MetricsOff, MetricsReader
from sparkdeck.metrics.sampler import MetricsSampler
from sparkdeck.presets import load_file
from tests.conftest import free_port, llama_preset_fields, write_preset
from tests.support.engine_load import observe_load, server_counter
from tests.support.images import TINY_MODEL_PATH

pytestmark = [pytest.mark.docker, pytest.mark.llama]
TOKENS = "llamacpp:tokens_predicted_total"


def _launch(runtime, tmp_path: Path, llama_image: str, preset_id: str, **extra):
    preset = load_file(
        write_preset(
            tmp_path / "presets",
            preset_id,
            **llama_preset_fields(llama_image, free_port(), **extra),
        )
    )
    return preset, Launcher(runtime, stop_grace=5).launch(preset, flush=False)


@pytest.mark.anyio
async def test_tok_s_agrees_with_the_server_and_queues_drain(runtime, tmp_path, llama_image):
    # 2 slots, 6 concurrent streams: some wait (deferred) while two run.
    preset, engine = _launch(runtime, tmp_path, llama_image, "metrics-llama", bytes_per_token=1e6)
    plan = get_kind(engine.kind).metrics_plan(engine.base_url, engine.metrics_path, preset)
    before = server_counter(engine.base_url, TOKENS)
    seen = await observe_load(
        plan, engine.base_url, "tiny", streams=6, max_tokens=700, ignore_eos=True
    )
    after = server_counter(engine.base_url, TOKENS)

    load = seen.load
    assert load.errors == [] and load.streams_ok == 6
    counted = after - before
    assert counted == load.completion_tokens > 0  # the server's counter and its replies agree
    # sparkdeck's tok/s, integrated over the window, against the server's own count over
    # the same window: within 2 %.
    ours, theirs = seen.rates_over_window(counted)
    assert abs(ours - theirs) <= 0.02 * theirs, (ours, theirs)
    # One stream's decode speed from the busy-time counter, against the replies' timings.
    stream_reference = load.predicted_n / (load.predicted_ms / 1000)
    final = seen.answered()[-1]
    assert final.stream_tps is not None
    assert abs(final.stream_tps - stream_reference) <= 0.02 * stream_reference
    # The queue moved and drained.
    assert seen.peak("running") == 2
    assert seen.peak("waiting") >= 1
    assert (final.running, final.waiting) == (0, 0)
    # The bandwidth ceiling from the preset's bytes per token: 273 GB/s / 1 MB.
    assert final.ceiling_tps == pytest.approx(273_000.0)
    assert final.ceiling_share == pytest.approx(final.stream_tps / 273_000.0)
    assert final.kv_usage is None and final.ttft_p50_s is None  # llama-server has neither


@pytest.mark.anyio
async def test_metrics_off_says_how_to_switch_them_on(runtime, tmp_path, llama_image):
    # The same server launched as a custom engine without --metrics: /metrics answers 501.
    argv = ["-m", TINY_MODEL_PATH, "--host", "0.0.0.0", "--port", "8080", "-c", "512"]
    preset = _custom_preset(tmp_path, llama_image, argv)
    engine = Launcher(runtime, stop_grace=5).launch(preset, flush=False)
    assert httpx.get(engine.base_url + "/metrics", timeout=5).status_code == 501

    plan = get_kind("llamacpp").metrics_plan(engine.base_url, "/metrics")

    async def one():
        reader = MetricsReader()
        try:
            return await reader.scrape(plan.target), await MetricsSampler(plan, reader).sample()
        finally:
            await reader.aclose()

    raw, metrics = await one()
    assert isinstance(raw, MetricsOff) and raw.status_code == 501
    assert metrics.status == "metrics-off" and "--metrics" in (metrics.reason or "")
    assert metrics.generation_tps is None and metrics.running is None  # not zeros

    cli = subprocess.run(
        [
            sys.executable,
            "-m",
            "sparkdeck",
            "metrics",
            "--endpoint",
            engine.base_url,
            "--kind",
            "llamacpp",
            "--samples",
            "2",
            "--json",
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    lines = [json.loads(line) for line in cli.stdout.splitlines()]
    assert cli.returncode == 0 and len(lines) == 2
    assert {line["status"] for line in lines} == {"metrics-off"}
    assert "--metrics" in lines[0]["reason"]


def _custom_preset(tmp_path: Path, image: str, argv: list[str]):
    fields = llama_preset_fields(image, free_port())
    fields.pop("llamacpp")
    fields.update(
        kind="openai", openai={"container_port": 8080, "command": argv, "health_path": "/health"}
    )
    return load_file(write_preset(tmp_path / "presets", "no-metrics", **fields))


def test_cli_json_samples_from_the_running_engine(runtime, tmp_path, llama_image, scope):
    _launch(runtime, tmp_path, llama_image, "cli-metrics")
    env_scope = {"SPARKDECK_SCOPE": scope}
    cli = subprocess.run(
        [
            sys.executable,
            "-m",
            "sparkdeck",
            "metrics",
            "--json",
            "--samples",
            "3",
            "--interval",
            "0.3",
        ],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, **env_scope},
    )
    assert cli.returncode == 0, cli.stderr
    lines = [json.loads(line) for line in cli.stdout.splitlines()]
    assert len(lines) == 3 and all(line["status"] == "ok" for line in lines)
    assert all(line["kind"] == "llamacpp" for line in lines)
    assert lines[0]["generation_tps"] is None  # one sample is no rate
    assert lines[-1]["generation_tps"] == 0.0 and lines[-1]["running"] == 0
