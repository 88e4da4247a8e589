"""How long the real-vLLM test tier takes, part by part, on this machine.

    .venv/bin/python benchmarks/vllm_tier.py [--python VLLM_PYTHON] [--starts 2]
                                             [--streams 5] [--tokens 256]

Prints: the tiny model's write time (fresh and cached), vLLM's start-to-healthy time for each
start, its stop time, the CPU the idle server uses, and for one stream at a time the time
to first token and the decode rate (tokens after the first / time after the first), as a
median over the streams. The load
average is printed beside the figures: on a 2-core box shared with other suites they move a
lot. The install is timed separately: `time bash .ci/install_vllm.sh EMPTY_DIR`.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from tests.support.vllm_server import VllmServer, running_vllm  # noqa: E402 (sys.path is set up first)

MODEL_SCRIPT = REPO / "tests" / "support" / "tiny_hf_model.py"


def _load() -> str:
    return " ".join(f"{x:.1f}" for x in os.getloadavg())


def _write_model(python: Path, out: Path) -> float:
    started = time.monotonic()
    subprocess.run([str(python), str(MODEL_SCRIPT), str(out)], check=True, capture_output=True)
    return time.monotonic() - started


def _one_stream(server: VllmServer, tokens: int) -> tuple[float, float, float]:
    """(seconds to the first content chunk, decode tok/s after it, tok/s over the request)."""
    payload = {
        "model": server.model,
        "stream": True,
        "max_tokens": tokens,
        "messages": [{"role": "user", "content": "Tell me a long story."}],
        "stream_options": {"include_usage": True},
    }
    started = time.monotonic()
    first = None
    completion = 0
    with httpx.stream(
        "POST", server.base_url + "/v1/chat/completions", json=payload, timeout=300
    ) as response:
        for line in response.iter_lines():
            if not line.startswith("data: {"):
                continue
            chunk = json.loads(line[6:])
            if first is None and chunk["choices"] and chunk["choices"][0]["delta"].get("content"):
                first = time.monotonic()
            if chunk.get("usage"):
                completion = chunk["usage"]["completion_tokens"]
    done = time.monotonic()
    assert first is not None and completion == tokens, (first, completion)
    return first - started, (completion - 1) / (done - first), completion / (done - started)


def _group_cpu_seconds(pgid: int) -> float:
    """CPU time (user + system) used so far by the live processes of one process group."""
    tick = os.sysconf("SC_CLK_TCK")
    total = 0.0
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[2]) == pgid:  # fields after the name: state, ppid, pgrp, ...
            total += (int(fields[11]) + int(fields[12])) / tick
    return total


def _idle_cpu(server: VllmServer, seconds: float = 10.0) -> float:
    """Share of one core the idle server uses: what it costs the tests that run beside it."""
    time.sleep(2.0)  # let the last request's work finish
    before = _group_cpu_seconds(server.pid)
    time.sleep(seconds)
    return (_group_cpu_seconds(server.pid) - before) / seconds


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--python",
        type=Path,
        default=Path(
            os.environ.get("SPARKDECK_VLLM_PYTHON", "/var/cache/sparkdeck-ci/vllm-venv/bin/python")
        ),
    )
    parser.add_argument("--starts", type=int, default=2)
    parser.add_argument("--streams", type=int, default=5)
    parser.add_argument("--tokens", type=int, default=256)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        model = Path(tmp) / "tiny-hf-model"
        print(
            f"model write: fresh {_write_model(args.python, model):.1f} s, "
            f"cached {_write_model(args.python, model):.2f} s   (load {_load()})"
        )
        for start in range(1, args.starts + 1):
            began = time.monotonic()
            with running_vllm(args.python, model, Path(tmp) / f"server{start}.log") as server:
                healthy = time.monotonic() - began
                print(f"start {start}: healthy after {healthy:.1f} s   (load {_load()})")
                runs = [_one_stream(server, args.tokens) for _ in range(args.streams)]
                ttft, decode, whole = (statistics.median(r[i] for r in runs) for i in range(3))
                # Decode alone can read high when a loaded API server sends chunks in bursts;
                # the whole-request rate (TTFT included) cannot.
                print(
                    f"  one stream x{args.streams}, {args.tokens} tokens: median TTFT "
                    f"{ttft * 1000:.0f} ms, decode {decode:.0f} tok/s, whole request "
                    f"{whole:.0f} tok/s (min {min(r[2] for r in runs):.0f}, max "
                    f"{max(r[2] for r in runs):.0f})   (load {_load()})"
                )
                print(f"  idle: {_idle_cpu(server) * 100:.1f} % of one core")
                stopping = time.monotonic()
            print(f"  stopped in {time.monotonic() - stopping:.1f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
