"""What the service's OpenAI endpoint adds, against the same real llama-server, in one run.

  DOCKER_HOST=... SPARKDECK_LLAMA_SERVER=... .venv/bin/python benchmarks/endpoint_overhead.py

The tiny llama-server test image is launched through the service (private dirs, a scope of
its own). Then, alternating direct (the engine's published port) and through the endpoint
(127.0.0.1:<endpoint port>), --runs streamed chat requests of --tokens tokens each
(`ignore_eos`, so every reply has the same length): TTFT (request sent -> first SSE event,
taken where the bytes are read) and decode tok/s ((events - 1) / first to last event).
Targets (issue 17): added TTFT <= 2 ms at the median, decode tok/s within 1 %.
Then --streams concurrent streams through the endpoint: every one must end with [DONE] and
status 200; the service's CPU (utime+stime from /proc) over that burst is reported.
Note: the tiny model decodes at thousands of tokens a second, one SSE event per token, so
the per-event cost of forwarding weighs far more here than behind a real model on a Spark
(tens of tokens a second).

CPU placement (default; --no-pin measures without it): on a Spark the engine decodes on the
GPU, and the service's CPU work never takes the engine's compute. A CPU-only llama-server on
a small test machine computes on the same cores as the service, so without placement the
figure measures the two competing for cores, not what forwarding adds. So the engine runs one
thread (`-t 1 -tb 1`) on the first CPU (its container's cpuset), and the service and this
client on the others (their affinity), for the direct and the through requests alike
(on two CPUs the client shares the engine's: place() says why).

A third arm, alternating with the other two, goes through a bare TCP relay (asyncio
streams copying bytes both ways, no HTTP: the least any process in the path can add), run
on the service's CPUs: the floor that what the endpoint adds is read against.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import docker
import httpx
import tomli_w

from benchmarks.service_cost import (
    clean_up,
    cli,
    cpu_seconds,
    service_pid,
)
from tests.conftest import free_port, llama_preset_fields
from tests.support.cpu_placement import pin
from tests.support.images import ensure_llama_image
from tests.support.tiny_gguf import write_tiny_gguf

MODEL = "/models/tiny.gguf"


async def one_stream(http: httpx.AsyncClient, base: str, tokens: int) -> tuple[float, float]:
    """(TTFT s, decode tok/s) of one streamed chat reply; raises unless it ends with [DONE]."""
    body = {
        "model": MODEL,
        "messages": [{"role": "user", "content": "count to ten"}],
        "max_tokens": tokens,
        "stream": True,
        "ignore_eos": True,
    }
    sent = time.perf_counter()
    first = last = None
    events, done = 0, False
    async with http.stream("POST", base + "/v1/chat/completions", json=body) as answer:
        if answer.status_code != 200:
            raise RuntimeError(f"{base}: HTTP {answer.status_code}")
        async for line in answer.aiter_lines():
            if not line.startswith("data:"):
                continue
            now = time.perf_counter()
            if line.strip() == "data: [DONE]":
                done = True
                continue
            first = first or now
            last = now
            events += 1
    if not done or first is None or last is None or last <= first:
        raise RuntimeError(f"{base}: the stream did not end with [DONE]")
    return first - sent, (events - 1) / (last - first)


@dataclass
class TinyEngine:
    """The tiny llama-server test image as a sparkdeck preset behind a real service and its
    endpoint, in dirs of its own (the endpoint benchmarks' common set-up)."""

    root: Path
    env: dict[str, str]
    scope: str
    client: docker.DockerClient
    preset_id: str
    engine_port: int
    endpoint_port: int

    @property
    def direct(self) -> str:
        return f"http://127.0.0.1:{self.engine_port}"

    @property
    def through(self) -> str:
        return f"http://127.0.0.1:{self.endpoint_port}"

    @classmethod
    def set_up(
        cls, prefix: str, preset_id: str, context: int, parallel: int, pinned: bool
    ) -> TinyEngine:
        """Dirs, environment, image and preset; nothing started yet (clean_up(env, client,
        scope) undoes what `launch` starts)."""
        root = Path(tempfile.mkdtemp(prefix=f"sd{prefix}-"))
        scope = prefix + uuid.uuid4().hex[:8]
        endpoint_port, engine_port = free_port(), free_port()
        env = {
            **os.environ,
            "SPARKDECK_CONFIG_DIR": str(root / "config"),
            "SPARKDECK_DATA_DIR": str(root / "data"),
            "SPARKDECK_RUNTIME_DIR": str(root / "run"),
            "SPARKDECK_SCOPE": scope,
            "SPARKDECK_SERVICE": "auto",
            "SPARKDECK_ENDPOINT_PORT": str(endpoint_port),
        }
        client = docker.from_env(timeout=120)
        image = ensure_llama_image(
            client, Path(os.environ["SPARKDECK_LLAMA_SERVER"]), write_tiny_gguf(root / "tiny.gguf")
        )
        llamacpp = {
            "context": context,
            "gpu_layers": 0,
            "parallel": parallel,
            "no_mmap_flag": ["--load-mode", "none"],
        }
        # pinned: one compute thread, so the engine keeps to the core place() gives it
        extra = {"args": ["-t", "1", "-tb", "1"]} if pinned else {}
        (root / "config" / "presets").mkdir(parents=True)
        (root / "config" / "presets" / f"{preset_id}.toml").write_text(
            tomli_w.dumps(
                {
                    "id": preset_id,
                    **llama_preset_fields(image, engine_port, llamacpp=llamacpp, **extra),
                }
            )
        )
        return cls(root, env, scope, client, preset_id, engine_port, endpoint_port)

    def launch(self) -> None:
        """`sparkdeck launch` it, then wait until the endpoint serves it."""
        launched = cli(self.env, "launch", self.preset_id, "--no-flush", "--timeout", "60")
        assert launched.returncode == 0, launched.stderr
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:  # the endpoint serves once the engine is ready
            try:
                answer = httpx.post(
                    self.through + "/v1/completions",
                    json={"model": MODEL, "prompt": "x", "max_tokens": 1},
                )
                if answer.status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.3)


def place(
    client: docker.DockerClient, scope: str, service: int, *, client_beside_engine: bool = False
) -> str:
    """The engine on the first CPU, the service on the others, and this process on a CPU of
    its own where there are three or more (see the docstring). On two CPUs this process
    shares one: the service's, or with `client_beside_engine` the engine's. A client's own
    work between its send and its wait for the answer delays whatever shares its CPU: beside
    the service it delays only the requests that go through (TTFT after a pause +2.06-2.11
    ms beside the service, +1.0-1.6 ms beside the engine, in test_endpoint_traffic on the
    2-core host, 2026-12-04), beside the engine both ways alike. But beside the engine it
    reads every direct token event on the engine's own CPU, which slows the direct decode
    (through/direct 115 %): TTFT is read beside the engine, decode beside the service."""
    cpus = sorted(os.sched_getaffinity(0))
    if len(cpus) < 2:
        return "not placed: one CPU only"
    engine = cpus[0]
    if len(cpus) >= 3:
        rest, mine = set(cpus[1:-1]), {cpus[-1]}
    else:
        rest = set(cpus[1:])
        mine = {engine} if client_beside_engine else rest
    for container in client.containers.list(filters={"label": f"io.sparkdeck.scope={scope}"}):
        container.update(cpuset_cpus=str(engine))
    pin(service, rest)
    pin(os.getpid(), mine)
    return (
        f"engine on CPU {engine} (one thread), service on CPUs "
        f"{','.join(map(str, sorted(rest)))}, client on CPUs {','.join(map(str, sorted(mine)))}"
    )


def start_relay(engine_port: int, cpus: set[int]) -> tuple[int, int]:
    """A bare TCP relay to the engine in a process of its own: (its port, its pid)."""
    port = free_port()
    pid = os.fork()
    if pid:
        return port, pid
    try:
        os.sched_setaffinity(0, cpus)

        async def pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            try:
                while data := await reader.read(65536):
                    writer.write(data)
            finally:
                writer.close()

        async def relay(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            up_reader, up_writer = await asyncio.open_connection("127.0.0.1", engine_port)
            await asyncio.gather(
                pipe(reader, up_writer), pipe(up_reader, writer), return_exceptions=True
            )

        async def serve() -> None:
            server = await asyncio.start_server(relay, "127.0.0.1", port)
            await server.serve_forever()

        asyncio.run(serve())
    finally:
        os._exit(0)


async def compare(arms: dict[str, str], runs: int, tokens: int, gap: float = 0.0) -> None:
    """Each arm `runs` times, taking turns; with `gap`, each request after that many
    seconds of quiet (a person typing between requests): the bare relay then shows what any
    extra process hop pays after a pause, beside what the endpoint pays."""
    results: dict[str, list[tuple[float, float]]] = {name: [] for name in arms}
    async with httpx.AsyncClient(timeout=60) as http:
        for base in arms.values():  # warm every path (connections, slot, caches)
            await one_stream(http, base, tokens)
        for i in range(runs):
            names = list(arms)
            for name in names[i % len(names) :] + names[: i % len(names)]:  # taking turns
                await asyncio.sleep(gap)
                results[name].append(await one_stream(http, arms[name], tokens))
    ttft = {k: statistics.median(t for t, _ in v) for k, v in results.items()}
    tps = {k: statistics.median(r for _, r in v) for k, v in results.items()}
    after = f", each after {gap:g} s of quiet" if gap else ""
    print(f"single stream, {runs} runs each, {tokens} tokens, alternating{after}:")
    for name in results:
        print(
            f"  {name:10} TTFT median {ttft[name] * 1000:7.2f} ms "
            f"({(ttft[name] - ttft['direct']) * 1000:+.2f})   decode median "
            f"{tps[name]:8.0f} tok/s ({100 * tps[name] / tps['direct']:.1f} %)"
        )
    print(
        f"  added TTFT {(ttft['through'] - ttft['direct']) * 1000:+.2f} ms at the median; "
        f"decode through/direct {100 * tps['through'] / tps['direct']:.1f} %"
    )
    if "bare relay" in ttft:
        print(
            f"  of which above the bare relay's floor: "
            f"{(ttft['through'] - ttft['bare relay']) * 1000:+.2f} ms"
        )


async def burst(through: str, streams: int, tokens: int, pid: int) -> None:
    limits = httpx.Limits(max_connections=streams, max_keepalive_connections=streams)
    async with httpx.AsyncClient(timeout=120, limits=limits) as http:
        cpu, began = cpu_seconds(pid), time.monotonic()
        outcomes = await asyncio.gather(
            *(one_stream(http, through, tokens) for _ in range(streams)), return_exceptions=True
        )
        wall = time.monotonic() - began
        used = cpu_seconds(pid) - cpu
    errors = [o for o in outcomes if isinstance(o, BaseException)]
    rates = [o[1] for o in outcomes if not isinstance(o, BaseException)]
    print(
        f"{streams} concurrent streams through the endpoint: {streams - len(errors)} ended "
        f"with [DONE], {len(errors)} errors{f' ({errors[0]})' if errors else ''}; "
        f"{wall:.2f} s wall; per-stream decode median "
        f"{statistics.median(rates) if rates else float('nan'):.0f} tok/s; service CPU "
        f"{used:.2f} s = {100 * used / wall:.0f} % of a core over the burst"
    )


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=30)
    parser.add_argument("--tokens", type=int, default=256)
    parser.add_argument("--streams", type=int, default=32)
    parser.add_argument(
        "--gap", type=float, default=0.0, help="seconds of quiet before each request"
    )
    parser.add_argument(
        "--no-pin",
        action="store_true",
        help="leave the engine, the service and the client where the "
        "scheduler puts them (see the docstring)",
    )
    parser.add_argument(
        "--client-beside-engine",
        action="store_true",
        help="on two CPUs, this client on the engine's CPU, not the service's (for TTFT; "
        "see place())",
    )
    args = parser.parse_args()
    bench = TinyEngine.set_up(
        "bench", "bench-ep", context=32768, parallel=8, pinned=not args.no_pin
    )
    env, scope, client = bench.env, bench.scope, bench.client
    engine_port, direct, through = bench.engine_port, bench.direct, bench.through
    try:
        bench.launch()
        service_cpus = set(os.sched_getaffinity(0))
        if not args.no_pin:
            service = service_pid(env)
            print(place(client, scope, service, client_beside_engine=args.client_beside_engine))
            service_cpus = os.sched_getaffinity(service)  # the relay runs where the service does
        else:
            print("not placed (--no-pin): engine, service and client share every CPU")
        relay_port, relay_pid = start_relay(engine_port, service_cpus)
        try:
            time.sleep(0.5)
            asyncio.run(
                compare(
                    {
                        "direct": direct,
                        "bare relay": f"http://127.0.0.1:{relay_port}",
                        "through": through,
                    },
                    args.runs,
                    args.tokens,
                    args.gap,
                )
            )
        finally:
            os.kill(relay_pid, 9)
            os.waitpid(relay_pid, 0)
        asyncio.run(burst(through, args.streams, args.tokens // 2, service_pid(env)))
    finally:
        clean_up(env, client, scope)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
