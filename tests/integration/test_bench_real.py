"""The benchmark against real engines: llama-server in a container sparkdeck launched (the
fingerprint then names the preset, image id and argv), and vLLM's CPU build."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest

from sparkdeck.bench.runner import BenchConfig
from sparkdeck.bench.session import BenchSession
from sparkdeck.bench.store import BenchStore
from sparkdeck.ui.bench.view import BenchComparison
from tests.conftest import free_port, llama_preset_fields, write_preset
from tests.support.bench_view_host import Host, settle
from tests.support.cli import run_cli
from tests.support.cli_env import cli_env  # noqa: F401 - a fixture


async def show_in_tui(store: BenchStore) -> list[tuple]:
    """The rows the comparison screen shows for the store's newest model."""

    async def scenario() -> list[tuple]:
        app = Host(store)
        async with app.run_test(size=(120, 40)) as pilot:
            view = app.screen.query_one(BenchComparison)
            await settle(pilot, lambda: len(view.runs) > 0)
            table = view.query_one("#bench-table")
            return [tuple(table.get_row_at(i)) for i in range(table.row_count)]

    return await scenario()


@pytest.mark.docker
@pytest.mark.llama
@pytest.mark.anyio
async def test_full_sweep_on_the_real_llama_server(
    cli_env, isolated_dirs, llama_image, docker_client
) -> None:
    port = free_port()
    write_preset(
        isolated_dirs["config"] / "presets", "bench-tiny", **llama_preset_fields(llama_image, port)
    )
    launched = run_cli("launch", "bench-tiny", "--no-flush", "--timeout", "60", env=cli_env)
    assert launched.returncode == 0, launched.stderr
    # no --endpoint: the engine sparkdeck runs is the target
    done = run_cli(
        "bench",
        "--json",
        "--concurrency",
        "1,2,4",
        "--runs",
        "2",
        "--prompt-tokens",
        "200",
        "--output-tokens",
        "48",
        env=cli_env,
        timeout=240,
    )
    assert done.returncode == 0, done.stderr
    run = json.loads(done.stdout)
    fp = run["fingerprint"]
    assert (fp["source"], fp["preset_id"], fp["kind"]) == ("managed", "bench-tiny", "llamacpp")
    assert fp["image_id"] == docker_client.images.get(llama_image).id
    # this build was made from an sdist without git data: it calls itself "b0-unknown"
    props = httpx.get(f"http://127.0.0.1:{port}/props", timeout=5).json()
    assert "--metrics" in fp["argv"] and fp["engine_version"] == props["build_info"]
    # llama-server's own tokenizer sized the prompt, and its usage agrees
    assert run["prompt_plan"]["counted_by"] == "tokenize"
    assert run["prompt_plan"]["total_tokens"] == 200
    # on a loaded 2-core machine replies may arrive in bursts (a warning); never miscounted
    assert not [w for w in run["warnings"] if "burst" not in w]
    assert [p["concurrency"] for p in run["points"]] == [1, 2, 4]
    for point in run["points"]:
        assert point["errors"] == 0 and point["ttft_s"] > 0
        # a 48-token reply of the tiny model takes ~6 ms: docker-proxy may hand all of it
        # over in one read, which leaves the client no decode time to measure (n/a, not a
        # made-up rate); llama-server's own figure is then the one there is
        assert (point["decode_tps"] or 0) > 0 or (
            point["summary"]["server_decode_tps"]["median"] > 0
        )
        assert point["summary"]["output_tokens"]["median"] == 48  # ignore_eos held
        assert point["summary"]["prompt_tokens"]["median"] == 200
    store = BenchStore(Path(run["store"]))
    [stored] = store.runs()
    # on a loaded 2-core machine docker-proxy may hand replies over in bursts that hide
    # more than 20 ms of llama-server's own decode time: the run then says so
    status = stored.status
    assert status == "complete" or (status == "unreliable" and "in bursts" in stored.reason)
    assert len(stored.points) == 3
    rows = await show_in_tui(store)
    assert rows[0][0] == "bench-tiny" and rows[0][3] == status and rows[0][4] != "-"
    shown = run_cli("bench", "history", env=cli_env)
    assert "bench-tiny" in shown.stdout and status in shown.stdout


@pytest.mark.vllm
@pytest.mark.anyio
async def test_full_sweep_on_the_real_vllm(vllm_server, isolated_dirs) -> None:
    config = BenchConfig(
        prompt_tokens=128, output_tokens=32, concurrency=(1, 2, 4, 8), runs=1, warmup=1
    )
    run = BenchSession(config, url=vllm_server.base_url).run()  # kind detected, as the CLI does
    # vLLM's CPU API server can fall behind its engine core on a busy 2-core box and hand
    # replies over in bursts: the run must then say so, with the server's own figures as proof
    assert run.status in ("complete", "unreliable"), run.reason
    if run.status == "unreliable":
        assert "delivered in bursts" in run.reason and "inter-token latency" in run.reason
    fp = run.fingerprint
    assert (fp.kind, fp.model, fp.source) == ("vllm", vllm_server.model, "flag")
    assert fp.engine_version == httpx.get(vllm_server.base_url + "/version").json()["version"]
    assert run.prompt_plan["counted_by"] == "tokenize"
    assert run.prompt_plan["total_tokens"] == 128
    assert [p.concurrency for p in run.points] == [1, 2, 4, 8]
    for point in run.points:
        assert point.errors == 0 and point.total_output_tps > 0
        # the server's own view of each level, from its latency histograms
        server_tps = point.summary["server_stream_decode_tps"]
        assert server_tps > 0 and 0 < point.summary["server_ttft_s"] < 10
        if run.status == "complete" and point.decode_tps:  # no burst: the two agree
            assert point.decode_tps <= 1.25 * server_tps, (point.decode_tps, server_tps)
        out = point.summary["output_tokens"]
        assert out["minimum"] == out["maximum"] == 32  # ignore_eos + min_tokens held
        # the tiny tokenizer's merges see a reordered prompt a token or two differently;
        # the figures use what the server counted, and the run says so
        assert abs(point.summary["prompt_tokens"]["median"] - 128) <= 2
    assert all("prompt tokens" in w or "burst" in w for w in run.warnings)
    rows = await show_in_tui(BenchStore())
    assert rows[0][0] == f"vllm@{vllm_server.base_url.split('//')[1]}"
    assert rows[0][3] == run.status and len(rows[0]) == 8


@pytest.mark.docker
@pytest.mark.llama
def test_what_does_not_fit_the_engines_context_is_on_record(
    cli_env, isolated_dirs, llama_image
) -> None:
    port = free_port()
    write_preset(
        isolated_dirs["config"] / "presets",
        "bench-small-ctx",
        **llama_preset_fields(llama_image, port),
    )  # 2048 context over 2 slots
    launched = run_cli("launch", "bench-small-ctx", "--no-flush", "--timeout", "60", env=cli_env)
    assert launched.returncode == 0, launched.stderr

    # 900 + 400 tokens overrun a 1024-token slot: llama-server ends the reply at the limit
    cut = run_cli(
        "bench",
        "--json",
        "--concurrency",
        "2",
        "--runs",
        "1",
        "--warmup",
        "0",
        "--prompt-tokens",
        "900",
        "--output-tokens",
        "400",
        env=cli_env,
        timeout=240,
    )
    assert cut.returncode == 0, cut.stderr
    run = json.loads(cut.stdout)
    # Each prompt comes to 900 tokens or the closest this tokenizer allows (one either side,
    # as the run warns; the two requests' prompts differ, so they may land apart: 900 and
    # 901 in one CI run): each reply is cut where its prompt + reply fill the slot's 1024.
    summary = run["points"][0]["summary"]
    prompts, replies = summary["prompt_tokens"], summary["output_tokens"]
    assert 899 <= prompts["minimum"] <= prompts["maximum"] <= 901, prompts
    [warning] = [w for w in run["warnings"] if "ended before" in w]
    assert (
        f"2 replies ended before 400 tokens (fewest {1024 - int(prompts['maximum'])}; "
        "finish reason: length)"
    ) in warning
    assert replies["minimum"] == 1024 - prompts["maximum"]
    assert replies["maximum"] == 1024 - prompts["minimum"]

    # 1100 prompt tokens do not fit at all: HTTP 400 with the engine's reason, on record
    refused = run_cli(
        "bench",
        "--json",
        "--concurrency",
        "2",
        "--runs",
        "1",
        "--warmup",
        "0",
        "--prompt-tokens",
        "1100",
        "--output-tokens",
        "50",
        env=cli_env,
        timeout=240,
    )
    assert refused.returncode == 1
    assert "benchmark failed: no request succeeded: HTTP 400" in refused.stderr
    assert "exceeds the available context size" in refused.stderr
    run = json.loads(refused.stdout)
    assert run["status"] == "failed" and run["points"][0]["errors"] == 2
    details = BenchStore(Path(run["store"])).request_details(run["id"], 2)
    assert all("exceeds the available context size" in d["error"] for d in details)
