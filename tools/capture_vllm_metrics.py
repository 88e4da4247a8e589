"""Capture what a real vLLM server answers on /metrics and /version, for tests to replay.

    .venv/bin/python tools/capture_vllm_metrics.py [OUT_DIR] [--python VLLM_PYTHON]

Starts vLLM's CPU build on the tiny random model (tests/support: the same server the `vllm`
test tier uses), saves /metrics while idle, sends a few streamed chat requests (two of them
at once, so the running-requests and KV-cache figures have been non-zero), saves /metrics
again, and saves /version. Files (OUT_DIR defaults to tests/fixtures/metrics):

    vllm-VERSION-idle.txt   vllm-VERSION-after-load.txt   vllm-VERSION-version.json

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

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from tests.support.vllm_server import VllmServer, running_vllm  # noqa: E402

DEFAULT_PYTHON = Path("/var/cache/sparkdeck-ci/vllm-venv/bin/python")


def _chat(server: VllmServer, max_tokens: int) -> None:
    payload = {"model": server.model, "stream": True, "max_tokens": max_tokens,
               "stream_options": {"include_usage": True},
               "messages": [{"role": "user", "content": "Write a short story about a dog."}]}
    with httpx.stream("POST", server.base_url + "/v1/chat/completions", json=payload,
                      timeout=120) as response:
        response.raise_for_status()
        for _ in response.iter_bytes():
            pass


def capture(server: VllmServer, out_dir: Path) -> list[Path]:
    """Save idle /metrics, load the server, save /metrics and /version; return the files."""
    version = httpx.get(server.base_url + "/version", timeout=30).json()["version"]
    out_dir.mkdir(parents=True, exist_ok=True)
    idle = out_dir / f"vllm-{version}-idle.txt"
    idle.write_text(httpx.get(server.base_url + "/metrics", timeout=30).text)
    _chat(server, 32)
    parallel = [threading.Thread(target=_chat, args=(server, 96)) for _ in range(2)]
    for thread in parallel:
        thread.start()
    for thread in parallel:
        thread.join()
    _chat(server, 16)
    time.sleep(1.0)  # the engine core's stats reach the API server's gauges a moment later
    loaded = out_dir / f"vllm-{version}-after-load.txt"
    loaded.write_text(httpx.get(server.base_url + "/metrics", timeout=30).text)
    version_file = out_dir / f"vllm-{version}-version.json"
    version_file.write_text(httpx.get(server.base_url + "/version", timeout=30).text + "\n")
    return [idle, loaded, version_file]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out_dir", nargs="?", type=Path,
                        default=REPO / "tests" / "fixtures" / "metrics")
    parser.add_argument("--python", type=Path,
                        default=Path(os.environ.get("SPARKDECK_VLLM_PYTHON", DEFAULT_PYTHON)))
    args = parser.parse_args()
    if not args.python.is_file():
        sys.exit(f"{args.python}: no vLLM venv; make one with "
                 "`bash .ci/install_vllm.sh /var/cache/sparkdeck-ci`")
    with tempfile.TemporaryDirectory() as tmp:
        model = subprocess.run(
            [str(args.python), str(REPO / "tests" / "support" / "tiny_hf_model.py"),
             str(Path(tmp) / "tiny-hf-model")], check=True, capture_output=True, text=True,
        ).stdout.strip()
        with running_vllm(args.python, Path(model), Path(tmp) / "server.log") as server:
            for path in capture(server, args.out_dir):
                print(path)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
