"""The endpoint under load, against the same llama-server direct and through LiteLLM's proxy.

  DOCKER_HOST=... SPARKDECK_LLAMA_SERVER=... .venv/bin/python benchmarks/endpoint_load.py \
      [--litellm /var/cache/sparkdeck-ci/litellm-venv/bin/litellm]

The tiny llama-server test image is launched through the service (private dirs, a scope of
its own, `--parallel` slots for every stream), the way `sparkdeck launch` does. LiteLLM's
proxy runs the way its users start it: `litellm --config config.yaml --port P` from its own
venv (`pip install 'litellm[proxy]'`), the config naming the same engine as an
OpenAI-compatible model (`model: openai/...`, `api_base` = the engine's URL). Three ways to
the one engine, each measured in turn:

- load: --streams streamed chat requests at once, each client sending its next request as
  soon as its last one ended, for --seconds: TTFT p50/p99 (request sent -> first SSE event,
  taken where the bytes are read), added TTFT (the proxy's p50/p99 less direct's),
  requests and tokens a second, errors (any status but 200, or a stream without [DONE]),
  and the proxy's CPU (utime+stime of its processes, /proc) per 1,000 requests.
- gaps: single streamed requests --gap-runs times each after a pause of 0, 0.5, 2 and 10 s,
  the ways taking turns: the median TTFT direct, and what each proxy adds to it.

Every reply has the same length (--tokens, `ignore_eos`). CPU placement as in
endpoint_overhead.py (--no-pin leaves it to the scheduler): the engine computes on the first
CPU with one thread; the proxies and this client share the others, so a proxy's own CPU
shows in what it adds rather than in the engine's speed. The tiny model decodes at
thousands of tokens a second, one SSE event a token: per event, a proxy's cost weighs far
more here than behind a real model on a Spark. Not part of pytest: it runs for minutes.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import secrets
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import aiohttp
import httpx

from benchmarks.endpoint_overhead import TinyEngine, place
from benchmarks.service_cost import TICK, clean_up, service_pid
from tests.conftest import free_port
from tests.support.cpu_placement import pin

MODEL = "/models/tiny.gguf"  # llama-server's id of its model (and sparkdeck's)
LITELLM_MODEL = "tiny"  # LiteLLM's name for it (its config's model_name)
LITELLM = "/var/cache/sparkdeck-ci/litellm-venv/bin/litellm"
GAPS_S = (0.0, 0.5, 2.0, 10.0)


@dataclass(frozen=True)
class Way:
    """One way to the engine: its base URL, the model name it takes, its process (None:
    the engine itself)."""

    name: str
    base: str
    model: str
    pid: int | None
    key: str | None = None  # a Bearer key it asks for (LiteLLM's master key)


@dataclass(frozen=True)
class Stream:
    """One streamed reply: TTFT and tokens (events), or the error that spoiled it."""

    ttft: float = 0.0
    tokens: int = 0
    error: str | None = None


@dataclass(frozen=True)
class Load:
    """A way's figures over one load window."""

    streams: list[Stream]
    seconds: float
    cpu_s: float | None  # the proxy's CPU over the window (None: direct)

    @property
    def ok(self) -> list[Stream]:
        return [s for s in self.streams if s.error is None]

    def ttft(self, q: float) -> float:
        return percentile([s.ttft for s in self.ok], q)

    @property
    def per_s(self) -> float:
        return len(self.ok) / self.seconds

    @property
    def tokens_per_s(self) -> float:
        return sum(s.tokens for s in self.ok) / self.seconds

    @property
    def cpu_per_1000(self) -> float | None:
        return None if self.cpu_s is None else 1000 * self.cpu_s / max(1, len(self.ok))


def percentile(values: list[float], q: float) -> float:
    """The q-th percentile (0-100), linear between the closest ranks; NaN with no values."""
    if not values:
        return float("nan")
    ordered = sorted(values)
    rank = (len(ordered) - 1) * q / 100
    low = int(rank)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


def tree_cpu(pid: int) -> float:
    """CPU seconds (utime+stime) of `pid` and its children, as /proc says now."""
    total = 0.0
    for task in Path(f"/proc/{pid}/task").iterdir():
        fields = (task / "stat").read_text().rsplit(")", 1)[1].split()
        total += (int(fields[11]) + int(fields[12])) / TICK
        for child in (task / "children").read_text().split():
            total += tree_cpu(int(child))
    return total


async def one_stream(session: aiohttp.ClientSession, way: Way, tokens: int) -> Stream:
    body = {
        "model": way.model,
        "messages": [{"role": "user", "content": "count to ten"}],
        "max_tokens": tokens,
        "stream": True,
        "ignore_eos": True,
    }
    headers = {"Authorization": f"Bearer {way.key}"} if way.key else None
    sent = time.perf_counter()
    first, events, done = None, 0, False
    try:
        async with session.post(
            way.base + "/v1/chat/completions", json=body, headers=headers
        ) as answer:
            if answer.status != 200:
                return Stream(error=f"HTTP {answer.status}")
            async for line in answer.content:
                if not line.startswith(b"data:"):
                    continue
                if line.strip() == b"data: [DONE]":
                    done = True
                    continue
                first = first or time.perf_counter()
                events += 1
    except (aiohttp.ClientError, TimeoutError) as exc:
        return Stream(error=type(exc).__name__)
    if not done or first is None:
        return Stream(error="no [DONE]")
    return Stream(first - sent, events)


def _session(connections: int) -> aiohttp.ClientSession:
    """A new connection for each request, every way alike: llama-server closes its end
    after each streamed answer, and a client pool that reuses one loses that race (seen:
    301 of 652 direct requests failed with a keep-alive pool at 50 streams)."""
    return aiohttp.ClientSession(
        connector=aiohttp.TCPConnector(limit=connections, force_close=True),
        timeout=aiohttp.ClientTimeout(total=300),
    )


async def load(way: Way, streams: int, seconds: float, tokens: int) -> Load:
    """`streams` clients, each sending its next request once its last one ended."""
    done: list[Stream] = []
    async with _session(streams) as session:
        await one_stream(session, way, tokens)  # warm: connections, slots
        deadline = time.monotonic() + seconds

        async def client() -> None:
            while time.monotonic() < deadline:
                done.append(await one_stream(session, way, tokens))

        cpu = tree_cpu(way.pid) if way.pid else None
        began = time.monotonic()
        await asyncio.gather(*(client() for _ in range(streams)))
        wall = time.monotonic() - began
        used = tree_cpu(way.pid) - cpu if way.pid and cpu is not None else None
    return Load(done, wall, used)


async def gaps(ways: list[Way], runs: int, tokens: int) -> dict[float, dict[str, float]]:
    """{gap: {way: median TTFT}}: single requests, each after `gap` s of quiet."""
    medians: dict[float, dict[str, float]] = {}
    async with _session(4) as session:
        for way in ways:
            await one_stream(session, way, tokens)
        for gap in GAPS_S:
            ttfts: dict[str, list[float]] = {way.name: [] for way in ways}
            for i in range(runs):
                for way in ways[i % len(ways) :] + ways[: i % len(ways)]:  # taking turns
                    await asyncio.sleep(gap)
                    stream = await one_stream(session, way, tokens)
                    if stream.error is None:
                        ttfts[way.name].append(stream.ttft)
            medians[gap] = {
                k: statistics.median(v) if v else float("nan") for k, v in ttfts.items()
            }
    return medians


def start_litellm(
    binary: str, engine_port: int, root: Path, cpus: set[int] | None
) -> tuple[subprocess.Popen[bytes], int, str]:
    """LiteLLM's proxy as a user runs it, configured for the engine: (process, its port,
    its master key). It refuses to start without a master key (LITELLM_MASTER_KEY): one is
    made for the run and given in its environment, never written to a file."""
    port, key = free_port(), "sk-" + secrets.token_hex(16)
    config = root / "litellm.yaml"
    config.write_text(
        "model_list:\n"
        f"  - model_name: {LITELLM_MODEL}\n"
        "    litellm_params:\n"
        f"      model: openai/{LITELLM_MODEL}\n"
        f"      api_base: http://127.0.0.1:{engine_port}/v1\n"
        "      api_key: none\n"
        "litellm_settings:\n"
        "  telemetry: false\n"
    )
    env = {
        **os.environ,
        "LITELLM_LOCAL_MODEL_COST_MAP": "True",
        "LITELLM_LOG": "ERROR",
        "LITELLM_MASTER_KEY": key,
    }
    with open(root / "litellm.log", "wb") as log:  # the child keeps its own descriptor
        process = subprocess.Popen(
            [
                binary,
                "--config",
                str(config),
                "--host",
                "127.0.0.1",
                "--port",
                str(port),
                "--num_workers",
                "1",
            ],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=log,
            stdin=subprocess.DEVNULL,
        )
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"litellm exited: {(root / 'litellm.log').read_text()[-2000:]}")
        try:
            if httpx.get(f"http://127.0.0.1:{port}/health/liveliness", timeout=2).is_success:
                break
        except httpx.HTTPError:
            pass
        time.sleep(0.5)
    else:
        raise RuntimeError("litellm did not answer within 180 s")
    if cpus:
        pin(process.pid, cpus)
        for child in Path(f"/proc/{process.pid}/task/{process.pid}/children").read_text().split():
            pin(int(child), cpus)
    return process, port, key


def ms(seconds: float | None) -> str:
    return "-" if seconds is None else f"{seconds * 1000:.2f}"


def report(
    loads: dict[str, Load],
    medians: dict[float, dict[str, float]],
    streams: int,
    seconds: float,
    tokens: int,
) -> None:
    direct = loads["direct"]
    print(f"\n{streams} concurrent streams for {seconds:.0f} s each way, {tokens} tokens a reply\n")
    print(
        "| way | requests | errors | TTFT p50 ms | TTFT p99 ms | added p50 ms | added p99 ms "
        "| requests/s | tokens/s | proxy CPU s / 1,000 requests |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|")
    for name, figures in loads.items():
        added = name != "direct"
        print(
            f"| {name} | {len(figures.streams)} | {len(figures.streams) - len(figures.ok)} "
            f"| {ms(figures.ttft(50))} | {ms(figures.ttft(99))} "
            f"| {ms(figures.ttft(50) - direct.ttft(50)) if added else '-'} "
            f"| {ms(figures.ttft(99) - direct.ttft(99)) if added else '-'} "
            f"| {figures.per_s:.1f} | {figures.tokens_per_s:.0f} "
            f"| {'-' if figures.cpu_per_1000 is None else f'{figures.cpu_per_1000:.1f}'} |"
        )
    names = [n for n in loads if n != "direct"]
    print("\nsingle requests after a pause (median TTFT direct; what each way adds)\n")
    print("| pause | direct ms | " + " | ".join(f"{n} added ms" for n in names) + " |")
    print("|---|---|" + "---|" * len(names))
    for gap, by_way in medians.items():
        print(
            f"| {gap:g} s | {ms(by_way['direct'])} | "
            + " | ".join(f"{(by_way[n] - by_way['direct']) * 1000:+.2f}" for n in names)
            + " |"
        )
    errors = {s.error for f in loads.values() for s in f.streams if s.error}
    if errors:
        print(f"\nerrors seen: {sorted(errors)}")


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--streams", type=int, default=50)
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--tokens", type=int, default=64)
    parser.add_argument("--gap-runs", type=int, default=5)
    parser.add_argument(
        "--litellm",
        default=LITELLM,
        help="LiteLLM's `litellm` command (pip install 'litellm[proxy]'); '' leaves LiteLLM out",
    )
    parser.add_argument("--no-pin", action="store_true")
    args = parser.parse_args()
    # a slot for every stream, each with room for the prompt and the reply
    bench = TinyEngine.set_up(
        "load",
        "load-ep",
        context=256 * args.streams,
        parallel=args.streams,
        pinned=not args.no_pin,
    )
    root, env, scope, client = bench.root, bench.env, bench.scope, bench.client
    engine_port, through = bench.engine_port, bench.through
    litellm = None
    try:
        bench.launch()
        service = service_pid(env)
        cpus = None
        if not args.no_pin:
            print(place(client, scope, service))
            cpus = set(os.sched_getaffinity(0))
        ways = [
            Way("direct", f"http://127.0.0.1:{engine_port}", MODEL, None),
            Way("sparkdeck", through, MODEL, service),
        ]
        if args.litellm:
            litellm, port, key = start_litellm(args.litellm, engine_port, root, cpus)
            ways.append(Way("litellm", f"http://127.0.0.1:{port}", LITELLM_MODEL, litellm.pid, key))
        loads: dict[str, Load] = {}
        for way in ways:
            print(f"load through {way.name} ...", flush=True)
            loads[way.name] = asyncio.run(load(way, args.streams, args.seconds, args.tokens))
        print("single requests after pauses ...", flush=True)
        medians = asyncio.run(gaps(ways, args.gap_runs, args.tokens))
        print(
            time.strftime("%Y-%m-%d"),
            "llama-server b11434 (tiny GGUF, CPU),",
            f"{os.cpu_count()} CPUs",
        )
        report(loads, medians, args.streams, args.seconds, args.tokens)
    finally:
        if litellm is not None:
            litellm.terminate()
            try:
                litellm.wait(timeout=15)
            except subprocess.TimeoutExpired:
                litellm.kill()
        clean_up(env, client, scope)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
