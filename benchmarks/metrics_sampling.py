"""What sampling an engine's metrics costs, measured the way a user runs it.

Starts a real llama-server (the cached b11434 build, a tiny GGUF) on loopback, then:
1. runs `sparkdeck metrics --endpoint URL --json --samples N` as a user would and reads the
   child's CPU time (N samples against 1 sample: the difference is the cost per sample);
2. times scrapes through the shared async client (p50 / p99 latency);
3. times the normalisation of one sample with a full minute of history, for every captured
   body in tests/fixtures/metrics (the vLLM body is the largest).

    .venv/bin/python benchmarks/metrics_sampling.py [--samples 30]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import resource
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from sparkdeck.engines import get_kind  # noqa: E402
from sparkdeck.metrics.exposition import parse_body  # noqa: E402
from sparkdeck.metrics.history import MetricsHistory  # noqa: E402
from sparkdeck.metrics.reader import MetricsReader, RawSample  # noqa: E402
from sparkdeck.metrics.snapshot import normalise  # noqa: E402
from tests.support.tiny_gguf import write_tiny_gguf  # noqa: E402

SERVER = Path(
    os.environ.get("SPARKDECK_LLAMA_SERVER", "/var/cache/sparkdeck-ci/llama-server-b11434")
)
FIXTURES = ROOT / "tests" / "fixtures" / "metrics"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_server(workdir: Path) -> tuple[subprocess.Popen, str]:
    model = write_tiny_gguf(workdir / "tiny.gguf")
    port = free_port()
    proc = subprocess.Popen(
        [
            str(SERVER),
            "-m",
            str(model),
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "-c",
            "2048",
            "--parallel",
            "2",
            "--metrics",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            if httpx.get(url + "/health", timeout=1).status_code == 200:
                return proc, url
        except httpx.TransportError:
            pass
        time.sleep(0.1)
    proc.kill()
    raise SystemExit("llama-server did not become healthy")


def cli_cpu(url: str, samples: int, interval: float) -> tuple[float, float]:
    """(CPU seconds, wall seconds) of one `sparkdeck metrics` run."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.monotonic()
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "sparkdeck",
            "metrics",
            "--endpoint",
            url,
            "--kind",
            "llamacpp",
            "--json",
            "--samples",
            str(samples),
            "--interval",
            str(interval),
        ],
        capture_output=True,
        text=True,
        cwd=ROOT,
        check=True,
    )
    wall = time.monotonic() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    assert len(done.stdout.splitlines()) == samples
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return cpu, wall


async def scrape_latencies(url: str, count: int) -> list[float]:
    plan = get_kind("llamacpp").metrics_plan(url, "/metrics")
    reader = MetricsReader()
    times = []
    try:
        for _ in range(count):
            started = time.perf_counter()
            result = await reader.scrape(plan.target)
            times.append(time.perf_counter() - started)
            assert isinstance(result, RawSample), result
    finally:
        await reader.aclose()
    return times


def normalise_cost(path: Path) -> tuple[str, int, float]:
    body = path.read_bytes()
    kind = path.name.split("-")[0]
    mapping = get_kind(kind).metrics_map
    history = MetricsHistory()
    for t in range(61):  # a full minute at one sample a second
        history.add(RawSample(parse_body(body), float(t), float(t)))
    rounds = 50
    started = time.perf_counter()
    for _ in range(rounds):
        normalise(history, mapping, kind)
    per_normalise = (time.perf_counter() - started) / rounds
    started = time.perf_counter()
    for _ in range(rounds):
        parse_body(body)
    per_parse = (time.perf_counter() - started) / rounds
    return path.name, len(body), per_normalise + per_parse


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--samples", type=int, default=30)
    parser.add_argument("--interval", type=float, default=1.0)
    args = parser.parse_args()
    print(f"machine: {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f}")
    with tempfile.TemporaryDirectory() as tmp:
        proc, url = start_server(Path(tmp))
        try:
            # Start-up (imports) dominates one sample: the quickest of three warm runs.
            one_cpu, one_wall = min(cli_cpu(url, 1, args.interval) for _ in range(3))
            many_cpu, many_wall = cli_cpu(url, args.samples, args.interval)
            per_sample = (many_cpu - one_cpu) / (args.samples - 1)
            print(
                f"sparkdeck metrics, 1 sample: {one_cpu * 1000:.0f} ms CPU "
                f"(start-up included), {one_wall:.2f} s wall"
            )
            print(
                f"sparkdeck metrics, {args.samples} samples at {args.interval:g} s: "
                f"{many_cpu * 1000:.0f} ms CPU, {many_wall:.2f} s wall; "
                f"{per_sample * 1000:.2f} ms CPU per sample = "
                f"{per_sample / args.interval * 100:.2f} % of one core"
            )
            latencies = asyncio.run(scrape_latencies(url, 200))
            q = statistics.quantiles(latencies, n=100)
            print(
                f"scrape latency over loopback (200 scrapes, shared client): "
                f"p50 {q[49] * 1000:.2f} ms, p99 {q[98] * 1000:.2f} ms"
            )
        finally:
            proc.terminate()
            proc.wait(timeout=10)
    for path in sorted(FIXTURES.iterdir()):
        if path.suffix in (".prom", ".txt") and path.name.split("-")[0] in (
            "vllm",
            "llamacpp",
            "sglang",
            "trtllm",
        ):
            name, size, cost = normalise_cost(path)
            print(
                f"parse + normalise with 60 s history: {name} ({size:,} bytes): "
                f"{cost * 1000:.2f} ms"
            )


if __name__ == "__main__":
    main()
