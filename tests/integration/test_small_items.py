"""What a new user saw (issue 12, the smaller items): the presets table, the launch
confirmation's memory lines, the palette, `bench history`'s columns, the memlock advice, and a
warning when an engine listens on the LAN (on the real Docker daemon)."""

from __future__ import annotations

import resource
import subprocess
import sys
from pathlib import Path

import pytest

from sparkdeck.guard.claims import GIB, MemoryClaim
from sparkdeck.guard.fit import check_fit
from sparkdeck.host.meminfo import MemorySnapshot
from sparkdeck.launch.plan import LaunchPlan
from sparkdeck.presets import load_file
from sparkdeck.runtime.errors import explain_start_failure
from tests.conftest import base_fields, free_port, remove_scope, write_preset
from tests.support.timed_server import running

ROOT = Path(__file__).resolve().parents[2]


def sparkdeck(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "sparkdeck", *args],
        cwd=ROOT,
        text=True,
        capture_output=True,
        timeout=240,
        stdin=subprocess.DEVNULL,
    )


def _columns(header: str, names: list[str]) -> list[int]:
    return [header.index(name) for name in names]


def test_presets_table_shows_the_claim_in_gib_and_the_setting_apart():
    done = sparkdeck("presets")
    assert done.returncode == 0, done.stderr
    header, *rows = done.stdout.split("\n\n")[0].splitlines()
    claim_at, setting_at, image_at = _columns(header, ["CLAIM", "MEMORY SETTING", "IMAGE"])
    by_id = {row.split()[0]: row for row in rows}
    vllm = by_id["vllm-ngc"]
    assert vllm[claim_at:setting_at].strip().endswith("GiB")  # an amount, only
    assert vllm[setting_at:image_at].strip() == "--gpu-memory-utilization 0.8"
    llama = by_id["llamacpp"]
    assert llama[claim_at:setting_at].strip().endswith("GiB")
    assert llama[setting_at:image_at].strip().startswith("-c ")
    assert "GiB" not in vllm[setting_at:image_at]


def test_the_confirmation_labels_the_setting_and_shows_the_claim_in_gib(tmp_path: Path):
    preset = load_file(
        write_preset(
            tmp_path,
            "tiny",
            title="tiny",
            kind="llamacpp",
            image="x/y:1",
            model="/m.gguf",
            llamacpp={"context": 2048, "gpu_layers": 0},
            **base_fields(),
        )
    )
    memory = MemorySnapshot(100 * GIB, 90 * GIB, 80 * GIB, 10 * GIB, 0, 0, 0)
    fit = check_fit(MemoryClaim(3 * GIB, "test basis"), memory, headroom=5 * GIB)
    lines = LaunchPlan(preset, (), preset.memory_setting(), False, None, fit).lines()
    assert f"memory setting: {preset.memory_setting()}" in lines
    assert preset.memory_setting().startswith("-c 2048")
    assert "memory it will claim: 3.0 GiB (test basis)" in lines
    assert not any(line.startswith("memory it will claim: -c") for line in lines)


@pytest.mark.anyio
async def test_the_palette_lists_each_command_once(tmp_path: Path):
    from tests.support.offline_app import make_app

    app, _ = make_app(tmp_path)

    async def names() -> list[str]:
        async with app.run_test():
            ours = [c.name for c in app.palette_commands()]
            system = [c.title for c in app.get_system_commands(app.screen)]
        return ours + system

    found = [n.casefold() for n in await names()]
    assert "theme" in found and "keys" in found  # ours, and Textual's own that we lack
    assert sorted(n for n in set(found) if found.count(n) > 1) == []


def test_bench_history_header_heads_its_columns():
    with running("usage_end", 20000.0, 400.0) as url:
        done = sparkdeck(
            "bench",
            "--endpoint",
            url,
            "--kind",
            "openai",
            "--concurrency",
            "1",
            "--runs",
            "1",
            "--warmup",
            "0",
            "--prompt-tokens",
            "64",
            "--output-tokens",
            "8",
        )
        assert done.returncode == 0, done.stderr
    header, row = sparkdeck("bench", "history").stdout.splitlines()
    for name, value in (
        ("started", "20"),
        ("status", "complete"),
        ("engine", "openai@"),
        ("model", "timed-model"),
    ):
        assert row.index(value) == header.index(name), (name, header, row)


def test_a_memlock_refusal_gives_the_number_to_use():
    text = explain_start_failure(
        "OCI runtime create failed: runc create failed: unable to start container process: "
        "error during container init: error setting rlimits for ready process: error setting "
        "rlimit type 8: operation not permitted",
        "img",
        "127.0.0.1",
        8000,
        ["x"],
    )
    assert "ulimit -Hl` x 1024" in text
    hard = resource.getrlimit(resource.RLIMIT_MEMLOCK)[1]
    if hard != resource.RLIM_INFINITY:
        assert f"memlock = {hard}" in text and f"{hard // 1024} x 1024" in text


@pytest.mark.docker
def test_lan_engine_is_flagged_at_launch_and_in_status(
    isolated_dirs, busybox_image, scope, docker_client, monkeypatch
):
    monkeypatch.setenv("SPARKDECK_SCOPE", scope)
    port = free_port()
    write_preset(
        isolated_dirs["config"] / "presets",
        "on-lan",
        title="on lan",
        kind="openai",
        image=busybox_image,
        port=port,
        lan=True,
        **base_fields(),
        openai={
            "container_port": 8080,
            "health_path": "/index.html",
            "entrypoint": ["/bin/sh", "-c", "exec httpd -f -p 8080 -h /www"],
        },
    )
    try:
        launched = sparkdeck("launch", "on-lan", "--no-flush", "--timeout", "60")
        assert launched.returncode == 0, launched.stderr
        assert f"published on every interface (0.0.0.0:{port}" in launched.stdout
        status = sparkdeck("status")
        assert f"WARNING: also reachable from the LAN: published on 0.0.0.0:{port}" in status.stdout
        report = sparkdeck("status", "--json").stdout
        assert '"published_on": "0.0.0.0"' in report
    finally:
        remove_scope(docker_client, scope)


@pytest.mark.docker
def test_a_loopback_engine_gets_no_lan_warning(
    isolated_dirs, busybox_image, scope, docker_client, monkeypatch
):
    monkeypatch.setenv("SPARKDECK_SCOPE", scope)
    write_preset(
        isolated_dirs["config"] / "presets",
        "local",
        title="local",
        kind="openai",
        image=busybox_image,
        port=free_port(),
        **base_fields(),
        openai={
            "container_port": 8080,
            "health_path": "/index.html",
            "entrypoint": ["/bin/sh", "-c", "exec httpd -f -p 8080 -h /www"],
        },
    )
    try:
        launched = sparkdeck("launch", "local", "--no-flush", "--timeout", "60")
        assert launched.returncode == 0, launched.stderr
        assert "published on every interface" not in launched.stdout
        status = sparkdeck("status")
        assert "LAN" not in status.stdout and "127.0.0.1" in status.stdout
    finally:
        remove_scope(docker_client, scope)


def test_the_engine_card_says_when_the_engine_is_on_the_lan():
    from dataclasses import replace

    from sparkdeck.ui.dashboard.engine_card import EngineReport, engine_content
    from sparkdeck.ui.readers import EngineReading
    from tests.support.offline_app import NOW, engine_state

    local = engine_state("running")
    assert "LAN" not in engine_content(EngineReport(reading=EngineReading(local, True)), NOW).plain
    on_lan = replace(local, published_on="0.0.0.0")
    text = engine_content(EngineReport(reading=EngineReading(on_lan, True)), NOW).plain
    assert "LAN      also on 0.0.0.0: anyone on the network can use it" in text
