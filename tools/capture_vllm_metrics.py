"""Capture what a real vLLM server answers on /metrics and /version, for tests to replay.

    .venv/bin/python tools/capture_vllm_metrics.py [OUT_DIR] [--python VLLM_PYTHON]

Starts vLLM's CPU build on the tiny random model (tests/support: the same server the `vllm`
test tier uses), saves /metrics while idle, sends a few streamed chat requests sharing a long
system prompt (so the prefix cache hits), saves /metrics while two of them stream at once
(running requests and KV-cache use are non-zero then) and again after the last one, and
saves /version. Files (OUT_DIR defaults to tests/fixtures/metrics):

    vllm-VERSION-idle.txt   vllm-VERSION-during-load.txt   vllm-VERSION-after-load.txt
    vllm-VERSION-version.json

The vLLM venv comes from --python, SPARKDECK_VLLM_PYTHON, or the CI cache
(/var/cache/sparkdeck-ci/vllm-venv; `bash .ci/install_vllm.sh DIR` makes it).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import httpx
from prometheus_client.parser import text_string_to_metric_families

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from tests.support.vllm_server import VllmServer, running_vllm  # noqa: E402 (sys.path is set up first)

DEFAULT_PYTHON = Path("/var/cache/sparkdeck-ci/vllm-venv/bin/python")


# A system prompt shared by every request (~200 tokens: several KV blocks, so the prefix
# cache has something to hit, while prompt and reply still fit --max-model-len 1024).
SYSTEM = " ".join(["You are a helpful assistant who answers in short plain sentences."] * 6)
LONG_REPLY = 600


def _chat(server: VllmServer, max_tokens: int) -> None:
    """One streamed chat request, read to the end."""
    payload = {
        "model": server.model,
        "stream": True,
        "max_tokens": max_tokens,
        "stream_options": {"include_usage": True},
        "messages": [
            {"role": "system", "content": SYSTEM},
            {"role": "user", "content": "Write a short story about a dog."},
        ],
    }
    with httpx.stream(
        "POST", server.base_url + "/v1/chat/completions", json=payload, timeout=120
    ) as response:
        response.raise_for_status()
        for _ in response.iter_bytes():
            pass


def _metrics(server: VllmServer) -> str:
    return httpx.get(server.base_url + "/metrics", timeout=30).text


def _metrics_while_running(server: VllmServer, running: int, timeout: float = 60.0) -> str:
    """/metrics as soon as it shows `running` requests in flight (the gauge lags a little)."""
    deadline = time.monotonic() + timeout
    while True:
        body = _metrics(server)
        gauge = [
            f for f in text_string_to_metric_families(body) if f.name == "vllm:num_requests_running"
        ]
        if gauge and sum(s.value for s in gauge[0].samples) >= running:
            return body
        if time.monotonic() > deadline:
            raise SystemExit(
                f"vLLM never showed {running} running requests; is it too fast "
                f"for {LONG_REPLY} tokens?"
            )
        time.sleep(0.1)


def capture(server: VllmServer, out_dir: Path) -> list[Path]:
    """Save /metrics idle, during two streams, and after them, plus /version; return the files.

    Requests, in order: 32 tokens alone, then two of LONG_REPLY at once (captured while both
    stream), then 16 alone: 1248 generated tokens and 4 requests in all.
    """
    version = httpx.get(server.base_url + "/version", timeout=30).json()["version"]
    out_dir.mkdir(parents=True, exist_ok=True)
    files = {
        name: out_dir / f"vllm-{version}-{name}.txt"
        for name in ("idle", "during-load", "after-load")
    }
    files["idle"].write_text(_metrics(server))
    _chat(server, 32)
    parallel = [threading.Thread(target=_chat, args=(server, LONG_REPLY)) for _ in range(2)]
    for thread in parallel:
        thread.start()
    files["during-load"].write_text(_metrics_while_running(server, 2))
    for thread in parallel:
        thread.join()
    _chat(server, 16)
    time.sleep(1.0)  # the engine core's stats reach the API server's gauges a moment later
    files["after-load"].write_text(_metrics(server))
    version_file = out_dir / f"vllm-{version}-version.json"
    version_file.write_text(httpx.get(server.base_url + "/version", timeout=30).text + "\n")
    return [*files.values(), version_file]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "out_dir", nargs="?", type=Path, default=REPO / "tests" / "fixtures" / "metrics"
    )
    parser.add_argument(
        "--python", type=Path, default=Path(os.environ.get("SPARKDECK_VLLM_PYTHON", DEFAULT_PYTHON))
    )
    args = parser.parse_args()
    if not args.python.is_file():
        sys.exit(
            f"{args.python}: no vLLM venv; make one with "
            "`bash .ci/install_vllm.sh /var/cache/sparkdeck-ci`"
        )
    with tempfile.TemporaryDirectory() as tmp:
        model = subprocess.run(
            [
                str(args.python),
                str(REPO / "tests" / "support" / "tiny_hf_model.py"),
                str(Path(tmp) / "tiny-hf-model"),
            ],
            check=True,
            capture_output=True,
            text=True,
        ).stdout.strip()
        with running_vllm(args.python, Path(model), Path(tmp) / "server.log") as server:
            for path in capture(server, args.out_dir):
                print(path)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
