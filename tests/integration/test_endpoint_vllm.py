"""The real vLLM (CPU build, tiny model) attached behind the service's OpenAI endpoint,
driven by the real `openai` client: streaming chat with usage, and /v1/models.

What a broken endpoint gets wrong here: the attached engine not found (503), its model not
listed or not marked running, a stream that arrives whole or loses the usage chunk, tokens
that vLLM itself never generated (its own counter is read to prove the reply came from it).
"""

from __future__ import annotations

import json
import re

import httpx
import openai
import pytest

from tests.conftest import free_port
from tests.support.cli import run_cli, wait_for
from tests.support.service_env import service_env  # noqa: F401 - a fixture

pytestmark = [pytest.mark.vllm, pytest.mark.docker]


def generated(base_url: str) -> float:
    text = httpx.get(base_url + "/metrics", timeout=10).text
    match = re.search(r"^vllm:generation_tokens_total\{[^}]*\} (\S+)$", text, re.M)
    assert match, "vllm:generation_tokens_total missing from /metrics"
    return float(match.group(1))


def test_attached_vllm_streams_through_the_endpoint_and_is_listed(
    vllm_server, service_env, isolated_dirs
):
    env = {**service_env, "SPARKDECK_ENDPOINT_PORT": str(free_port())}
    assert run_cli("service", "start", env=env).returncode == 0
    attached = run_cli(
        "attach", vllm_server.base_url, "--kind", "vllm", "--name", "cpu-vllm", env=env
    )
    assert attached.returncode == 0, attached.stderr
    base = f"http://127.0.0.1:{env['SPARKDECK_ENDPOINT_PORT']}/v1"
    client = openai.OpenAI(base_url=base, api_key="unused", max_retries=0, timeout=120)

    def listed():
        try:
            return [m for m in client.models.list().data if m.model_extra.get("running")]
        except openai.APIError:
            return None

    running = wait_for(listed, timeout=30, what="vLLM listed as running", every=0.5)
    assert [m.id for m in running] == [vllm_server.model]
    assert running[0].owned_by == "vllm"  # vLLM's own entry, passed through

    before = generated(vllm_server.base_url)
    chunks = list(
        client.chat.completions.create(
            model=vllm_server.model,
            messages=[{"role": "user", "content": "hello there"}],
            max_tokens=24,
            stream=True,
            stream_options={"include_usage": True},
        )
    )
    assert sum(bool(c.choices and c.choices[0].delta.content) for c in chunks) >= 3
    assert chunks[-1].usage is not None and chunks[-1].usage.completion_tokens == 24
    assert all(c.model == vllm_server.model for c in chunks)
    assert generated(vllm_server.base_url) - before == 24  # vLLM itself made the reply

    # another model is refused naming vLLM's (no preset names it: nothing to switch to)
    with pytest.raises(openai.NotFoundError) as refused:
        client.chat.completions.create(
            model="not-a-model", max_tokens=4, messages=[{"role": "user", "content": "hi"}]
        )
    assert vllm_server.model in refused.value.body["message"]

    log = isolated_dirs["data"] / "requests.jsonl"
    row = wait_for(
        lambda: (
            log.exists()
            and [r for r in map(json.loads, log.read_text().splitlines()) if r["status"] == 200][:1]
        ),
        timeout=5,
        what="the stream logged",
    )[0]
    assert (row["stream"], row["output_tokens"], row["tokens_from"]) == (True, 24, "usage")
    assert row["engine"] == "cpu-vllm" and row["ttft_s"] > 0
