"""The service's OpenAI endpoint, driven by the real `openai` client, in front of the real
llama-server container launched through the service (real Docker, real HTTP on loopback).

What a broken forwarder gets wrong: usage lost or not streamed, another model's request
let through (or refused without saying what runs and how to switch), an upstream request
left generating after its client went away, presets missing from /v1/models, a LAN
listener with no key, a key not enforced, prompt text in the request log.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import tomllib
from collections.abc import Iterator
from pathlib import Path

import httpx
import openai
import pytest

from tests.conftest import free_port, llama_preset_fields, write_preset
from tests.support.cli import run_cli, wait_for
from tests.support.endpoint_switching import RUNNING_MODEL, llama_metric
from tests.support.service_env import service_env  # noqa: F401 - a fixture

pytestmark = [pytest.mark.docker, pytest.mark.llama]
PROMPT = "zebra quartz lantern"  # must never reach the request log
STREAMED = 2000  # tokens of the streamed answer
REPO_PRESETS = Path(__file__).resolve().parents[2] / "presets"  # the bundled ones


def bundled_models() -> list[tuple[str, str]]:
    """(model, preset id) of each bundled preset, read here with tomllib: the first preset
    by id of each model (a preset without a model is listed by its id)."""
    presets = []
    for path in REPO_PRESETS.glob("*.toml"):
        data = tomllib.loads(path.read_text())
        presets.append((data.get("id", path.stem), data.get("model")))
    found: dict[str, str] = {}
    for preset, model in sorted(presets):
        found.setdefault(model or preset, preset)
    assert len(found) >= 2, f"no bundled presets in {REPO_PRESETS}"
    return list(found.items())


@pytest.fixture
def endpoint_env(service_env, isolated_dirs) -> dict[str, str]:
    return {**service_env, "SPARKDECK_ENDPOINT_PORT": str(free_port())}


@pytest.fixture
def running(endpoint_env, isolated_dirs, llama_image) -> Iterator[dict]:
    """The tiny llama-server launched through the service; a second preset that is not
    running (another model); the endpoint answering with the running model."""
    engine_port = free_port()
    presets = isolated_dirs["config"] / "presets"
    # a long context: a reply can run for seconds, long enough to walk away from mid-stream
    write_preset(
        presets,
        "ep-tiny",
        **llama_preset_fields(
            llama_image,
            engine_port,
            llamacpp={
                "context": 32768,
                "gpu_layers": 0,
                "parallel": 1,
                "no_mmap_flag": ["--load-mode", "none"],
            },
        ),
    )
    write_preset(
        presets,
        "ep-other",
        **llama_preset_fields(llama_image, free_port(), model="/models/other.gguf"),
    )
    launched = run_cli("launch", "ep-tiny", "--no-flush", "--timeout", "60", env=endpoint_env)
    assert launched.returncode == 0, launched.stderr
    base = f"http://127.0.0.1:{endpoint_env['SPARKDECK_ENDPOINT_PORT']}/v1"

    seen: list[object] = []

    def serving() -> bool:
        try:
            seen.append(listed := httpx.get(base + "/models", timeout=5).json()["data"])
        except (httpx.HTTPError, ValueError, KeyError) as exc:
            seen.append(exc)
            return False
        return any(m.get("running") for m in listed)

    try:
        wait_for(serving, timeout=30, what="the endpoint serving the engine", every=0.3)
    except AssertionError:
        log = isolated_dirs["data"] / "service.log"
        status = run_cli("service", "status", "--json", env=endpoint_env).stdout[:300]
        status += subprocess.run(["ps", "-eo", "pid,args"], capture_output=True, text=True).stdout
        raise AssertionError(
            f"last answer {seen[-1:]}; service.log: "
            f"{log.read_text() if log.exists() else '-'} {status}"
        ) from None
    yield {
        "base": base,
        "engine_port": engine_port,
        "env": endpoint_env,
        "data": isolated_dirs["data"],
    }


def test_openai_client_through_the_endpoint_streaming_and_not_with_usage(running, isolated_dirs):
    client = openai.OpenAI(base_url=running["base"], api_key="unused", max_retries=0)
    messages = [{"role": "user", "content": PROMPT}]
    # ignore_eos (llama.cpp's): the random tiny model may end a reply at any token
    fixed = {"ignore_eos": True}
    whole = client.chat.completions.create(
        model=RUNNING_MODEL, messages=messages, max_tokens=24, extra_body=fixed
    )
    assert whole.usage is not None and whole.usage.completion_tokens == 24
    assert whole.usage.prompt_tokens > 3

    chunks = list(
        client.chat.completions.create(
            # long enough to arrive in many reads: a burst read at once has no decode speed to
            # measure, and the request log then says none (decode_tps null), not a made-up one.
            # The tiny model decodes 2,000-4,700 tok/s on the 2-core CI machine, so 400 tokens
            # took 0.1-0.2 s: a service starved that long by llama-server's own threads read
            # them in one go (decode_tps null, a CI failure); 2,000 take about a second.
            model=RUNNING_MODEL,
            messages=messages,
            max_tokens=STREAMED,
            stream=True,
            stream_options={"include_usage": True},
            extra_body=fixed,
        )
    )
    assert sum(bool(c.choices) for c in chunks) >= 5  # streamed, not one answer
    assert chunks[-1].usage is not None and chunks[-1].usage.completion_tokens == STREAMED
    # the preset's id names the running model too (the endpoint rewrites it to the engine's)
    plain = list(
        client.completions.create(
            model="ep-tiny", prompt=PROMPT, max_tokens=16, stream=True, extra_body=fixed
        )
    )
    assert plain and all(c.model for c in plain)

    log = isolated_dirs["data"] / "requests.jsonl"
    rows = wait_for(
        lambda: (
            [json.loads(x) for x in log.read_text().splitlines()]
            if log.exists() and len(log.read_text().splitlines()) >= 3
            else None
        ),
        timeout=5,
        what="three request-log lines",
    )
    assert PROMPT not in log.read_text()
    first, streamed, completion = rows[:3]
    assert (first["status"], first["stream"], first["output_tokens"], first["tokens_from"]) == (
        200,
        False,
        24,
        "usage",
    )
    assert (streamed["stream"], streamed["output_tokens"], streamed["tokens_from"]) == (
        True,
        STREAMED,
        "usage",
    )
    assert 0 < streamed["ttft_s"] < 5 and streamed["decode_tps"] > 10
    # complete answers: uvicorn's disconnect right after the last byte is not an early exit
    assert first["error"] is None and streamed["error"] is None
    assert streamed["client"].startswith("127.0.0.1:")
    # no include_usage asked: llama-server b11434 still ends /v1/completions with usage
    # (else its timings would give the count; tests/unit/test_endpoint_meter.py covers that)
    assert completion["output_tokens"] == 16
    assert completion["tokens_from"] in ("usage", "timings")

    shown = run_cli("requests", "--json", "--since", "10m", env=running["env"], timeout=30)
    assert shown.returncode == 0, shown.stderr
    assert [r["output_tokens"] for r in json.loads(shown.stdout)][:3] == [24, STREAMED, 16]


def test_another_presets_model_is_refused_naming_the_running_one_and_the_switch(running):
    client = openai.OpenAI(base_url=running["base"], api_key="unused", max_retries=0)
    with pytest.raises(openai.NotFoundError) as refused:
        client.chat.completions.create(
            model="/models/other.gguf", max_tokens=4, messages=[{"role": "user", "content": "hi"}]
        )
    message = refused.value.body["message"]
    assert RUNNING_MODEL in message and "sparkdeck launch ep-other" in message
    assert refused.value.body["code"] == "model_not_found"


def test_models_lists_every_preset_and_marks_the_running_one(running):
    listed = openai.OpenAI(base_url=running["base"], api_key="unused").models.list()
    by_id = {m.id: m.model_extra for m in listed.data}
    assert by_id[RUNNING_MODEL]["running"] is True
    assert by_id[RUNNING_MODEL]["preset"] == "ep-tiny"
    assert by_id["/models/other.gguf"] == {"running": False, "preset": "ep-other"} | {
        k: v for k, v in by_id["/models/other.gguf"].items() if k not in ("running", "preset")
    }
    assert by_id["/models/other.gguf"]["running"] is False


def test_a_client_that_walks_away_mid_stream_aborts_the_engines_request(
    running, docker_client, scope
):
    """The engine's own gauge: 1 while the stream runs, 0 soon after the client closes,
    long before the reply would have ended (a forwarder that keeps reading would hold it)."""
    port = running["engine_port"]
    # The tiny model's reply ends at its 4096-token training context, whatever max_tokens
    # asks: about a second at full speed, which a busy host's scheduling could use up
    # before the walk-away (the gauge then read 0, or the reply was logged whole with
    # 4,056 tokens: three CI runs, 2026-12-03/04). On a tenth of a CPU it runs for seconds.
    (engine,) = docker_client.containers.list(filters={"label": f"io.sparkdeck.scope={scope}"})
    engine.update(cpu_period=100_000, cpu_quota=10_000)
    client = openai.OpenAI(base_url=running["base"], api_key="unused", max_retries=0)
    stream = client.chat.completions.create(
        model=RUNNING_MODEL,
        messages=[{"role": "user", "content": PROMPT}],
        max_tokens=30000,
        stream=True,
        extra_body={"ignore_eos": True},
    )  # llama.cpp's
    for index, _ in enumerate(stream):
        if index == 20:
            break
    # the reply runs for seconds: the engine's gauge says so (read for up to 1 s). A reply
    # already over would leave the abort below untested: then this fails, saying how far
    # the engine got.
    wait_for(
        lambda: llama_metric(port, "llamacpp:requests_processing") == 1,
        timeout=1,
        every=0.05,
        what=lambda: (
            "llama-server's requests_processing at 1 while the reply streams; tokens "
            f"predicted so far {llama_metric(port, 'llamacpp:tokens_predicted_total'):.0f}"
        ),
    )
    before = llama_metric(port, "llamacpp:tokens_predicted_total")
    stream.close()
    closed = time.monotonic()
    wait_for(
        lambda: llama_metric(port, "llamacpp:requests_processing") == 0,
        timeout=3,
        what="llama-server's requests_processing back to 0",
        every=0.05,
    )
    took = time.monotonic() - closed
    predicted = llama_metric(port, "llamacpp:tokens_predicted_total") - before
    print(
        f"aborted {took * 1000:.0f} ms after the client closed; {predicted:.0f} tokens "
        "counted after that"
    )
    assert predicted < 20000  # it stopped well short of the 30,000 asked for
    log = running["data"] / "requests.jsonl"
    walked = wait_for(
        lambda: (
            [
                r
                for r in map(json.loads, log.read_text().splitlines())
                if r["error"] == "the client disconnected"
            ]
            if log.exists()
            else None
        ),
        timeout=5,
        what=lambda: (
            "the disconnect logged; the log holds "
            + str(
                [
                    {k: r[k] for k in ("status", "stream", "output_tokens", "error")}
                    for r in map(json.loads, log.read_text().splitlines())
                ]
                if log.exists()
                else "nothing"
            )
        ),
    )
    assert walked[0]["stream"] is True and walked[0]["status"] == 200


def test_a_lan_address_without_a_key_is_refused_at_start(isolated_dirs):
    isolated_dirs["config"].mkdir(parents=True, exist_ok=True)
    (isolated_dirs["config"] / "settings.toml").write_text(
        '[endpoint]\nhost = "0.0.0.0"\napi_key_env = "EP_TEST_KEY"\n'
    )
    env = {k: v for k, v in os.environ.items() if k != "EP_TEST_KEY"}
    done = subprocess.run(
        [sys.executable, "-m", "sparkdeck", "service", "run"],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    assert done.returncode == 2
    assert "0.0.0.0" in done.stderr and "EP_TEST_KEY" in done.stderr
    assert "without an API key" in done.stderr


def test_with_a_key_a_request_without_it_gets_401(endpoint_env, isolated_dirs):
    isolated_dirs["config"].mkdir(parents=True, exist_ok=True)
    (isolated_dirs["config"] / "settings.toml").write_text(
        '[endpoint]\nhost = "0.0.0.0"\napi_key_env = "EP_TEST_KEY"\n'
    )
    env = {**endpoint_env, "EP_TEST_KEY": "s3cret-key"}
    assert run_cli("service", "start", env=env).returncode == 0
    base = f"http://127.0.0.1:{env['SPARKDECK_ENDPOINT_PORT']}/v1"
    with pytest.raises(openai.AuthenticationError) as refused:
        openai.OpenAI(base_url=base, api_key="wrong", max_retries=0).models.list()
    assert refused.value.body["code"] == "invalid_api_key"
    bare = httpx.post(base + "/chat/completions", json={"messages": []}, timeout=5)
    assert bare.status_code == 401 and "Authorization: Bearer" in bare.json()["error"]["message"]
    listed = httpx.get(base + "/models", headers={"Authorization": "Bearer s3cret-key"}, timeout=5)
    assert listed.status_code == 200
    # no engine and no preset of the user's: each bundled preset's model, once, by preset id
    assert [(m["id"], m["preset"], m["running"]) for m in listed.json()["data"]] == [
        (model, preset, False) for model, preset in bundled_models()
    ]
    # no engine: a clear OpenAI-style 503
    with pytest.raises(openai.APIStatusError) as none:
        openai.OpenAI(base_url=base, api_key="s3cret-key", max_retries=0).chat.completions.create(
            model="x", messages=[]
        )
    assert none.value.status_code == 503 and "sparkdeck launch" in none.value.body["message"]
    shown = run_cli("endpoint", env=env, timeout=30)
    assert "EP_TEST_KEY" in shown.stdout and "s3cret-key" not in shown.stdout + shown.stderr


def test_embeddings_go_through_with_their_usage(endpoint_env, isolated_dirs, llama_image):
    """/v1/embeddings from a llama-server started with --embeddings, through the endpoint."""
    write_preset(
        isolated_dirs["config"] / "presets",
        "ep-embed",
        **llama_preset_fields(llama_image, free_port(), args=["--embeddings", "--pooling", "mean"]),
    )
    launched = run_cli("launch", "ep-embed", "--no-flush", "--timeout", "60", env=endpoint_env)
    assert launched.returncode == 0, launched.stderr
    client = openai.OpenAI(
        base_url=f"http://127.0.0.1:{endpoint_env['SPARKDECK_ENDPOINT_PORT']}/v1",
        api_key="unused",
        max_retries=0,
    )

    def embedded():
        try:
            return client.embeddings.create(model=RUNNING_MODEL, input=["a b c", PROMPT])
        except openai.APIStatusError as exc:
            assert exc.status_code == 503, exc  # only "not ready yet" may come before
            return None

    answer = wait_for(embedded, timeout=30, what="an embedding through the endpoint", every=0.3)
    assert [len(d.embedding) for d in answer.data] == [64, 64]  # the tiny model's n_embd
    assert answer.usage.prompt_tokens > 0
    log = isolated_dirs["data"] / "requests.jsonl"
    row = wait_for(
        lambda: (
            log.exists()
            and [r for r in map(json.loads, log.read_text().splitlines()) if r["status"] == 200][
                -1:
            ]
        ),
        timeout=5,
        what="the log line",
    )[0]
    assert (row["path"], row["status"], row["prompt_tokens"]) == (
        "/v1/embeddings",
        200,
        answer.usage.prompt_tokens,
    )
