"""The service's cost and its guard's speed, measured the way a user runs it.

  DOCKER_HOST=... SPARKDECK_LLAMA_SERVER=... .venv/bin/python benchmarks/service_cost.py

1. idle: `sparkdeck service start` with no engine; CPU (utime+stime from /proc) over
   --seconds, and RSS. Targets: <= 0.3 % of a core, <= 45 MiB.
2. with an engine: `sparkdeck launch` of the tiny llama-server test image through the
   service; watchdog + telemetry + engine metrics at 1 Hz; CPU over --seconds. Target
   <= 1.5 % of a core.
3. threshold-to-stopped with the service (--runs, >= 5): the guard's stop threshold is set in
   settings.toml halfway down a real, bounded memory hog's drop (min(2 GiB, 1/8 of
   MemAvailable)); the crossing is timed by polling /proc/meminfo every 5 ms, the stop twice:
   when the engine's main process is gone from /proc (polled every 5 ms: the engine stopped
   and its memory is free), and when the container is gone from Docker (asked every 20 ms:
   the guard also removes it). Target <= 2 s.
Everything runs in private dirs and a scope of its own; nothing of the user's is touched.

Before 1., a baseline is measured the same way: a bare Python process that reads
/proc/meminfo once a second and does nothing else (the least a 1 Hz recorder can cost). On a
virtual machine that pages idle processes' memory out (e.g. DAMON's proactive reclaim), every
wake-up after a second of sleep costs far more than its work, and this floor moves from hour
to hour: read the service's figures against the baseline of the same run.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import docker
import tomli_w

from sparkdeck.host.meminfo import read_meminfo
from tests.conftest import free_port, llama_preset_fields
from tests.support.images import ensure_llama_image
from tests.support.memory_hog import MemoryHog
from tests.support.tiny_gguf import write_tiny_gguf

GIB, MIB = 2**30, 2**20
BARE_LOOP = (
    "import time, pathlib\nwhile True:\n"
    "    pathlib.Path('/proc/meminfo').read_text()\n    time.sleep(1.0)\n"
)
TICK = os.sysconf("SC_CLK_TCK")


def cli(env: dict[str, str], *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "sparkdeck", *args],
        env=env,
        text=True,
        capture_output=True,
        timeout=180,
        stdin=subprocess.DEVNULL,
    )


def service_pid(env: dict[str, str]) -> int:
    return json.loads(cli(env, "service", "status", "--json").stdout)["pid"]


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def cpu_share(pid: int, seconds: float) -> float:
    before, began = cpu_seconds(pid), time.monotonic()
    time.sleep(seconds)
    return 100 * (cpu_seconds(pid) - before) / (time.monotonic() - began)


def clean_up(env: dict[str, str], client: docker.DockerClient, scope: str) -> None:
    """Stop the engine and the service, and remove whatever the run left in its scope."""
    cli(env, "stop")
    cli(env, "service", "stop")
    for c in client.containers.list(all=True, filters={"label": f"io.sparkdeck.scope={scope}"}):
        c.remove(force=True)


def write_preset(config: Path, image: str, port: int) -> None:
    (config / "presets").mkdir(parents=True, exist_ok=True)
    (config / "presets" / "bench-svc.toml").write_text(
        tomli_w.dumps({"id": "bench-svc", **llama_preset_fields(image, port)})
    )


def stop_latency(
    env: dict[str, str], client: docker.DockerClient, scope: str, hog_size: int, threshold: int
) -> tuple[float, float]:
    """(crossing -> the engine's process gone, crossing -> its container gone from Docker)."""
    launched = cli(env, "launch", "bench-svc", "--no-flush", "--yes", "--timeout", "60")
    assert launched.returncode == 0, launched.stderr
    time.sleep(3)  # the service guards it at 1 Hz once ready
    (engine,) = client.containers.list(filters={"label": f"io.sparkdeck.scope={scope}"})
    engine_pid = engine.attrs["State"]["Pid"]
    crossed: list[float] = []
    killed: list[float] = []
    done = threading.Event()

    def watch_memory() -> None:
        while not done.is_set():
            if read_meminfo().available < threshold and not crossed:
                crossed.append(time.monotonic())
            if not killed and not Path(f"/proc/{engine_pid}").exists():
                killed.append(time.monotonic())
            time.sleep(0.005)

    def watch_docker() -> None:  # from the start: the hog's allocate() returns only when
        # it holds every page, which on this VM is seconds after the crossing
        while client.containers.list(filters={"label": f"io.sparkdeck.scope={scope}"}):
            time.sleep(0.02)
        gone.append(time.monotonic())

    gone: list[float] = []
    watchers = [
        threading.Thread(target=watch_memory, daemon=True),
        threading.Thread(target=watch_docker, daemon=True),
    ]
    for watcher in watchers:
        watcher.start()
    with MemoryHog(hog_size) as hog:
        hog.allocate()
        watchers[1].join(timeout=60)
    done.set()
    watchers[0].join()
    assert gone and crossed, "the guard did not stop the engine within 60 s of the hog"
    return (killed[0] if killed else gone[0]) - crossed[0], gone[0] - crossed[0]


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="sdbench-"))
    scope = "bench" + uuid.uuid4().hex[:8]
    env = {
        **os.environ,
        "SPARKDECK_CONFIG_DIR": str(root / "config"),
        "SPARKDECK_DATA_DIR": str(root / "data"),
        "SPARKDECK_RUNTIME_DIR": str(root / "run"),
        "SPARKDECK_SCOPE": scope,
        "SPARKDECK_SERVICE": "auto",
    }
    client = docker.from_env(timeout=120)
    model = write_tiny_gguf(root / "tiny.gguf")
    image = ensure_llama_image(client, Path(os.environ["SPARKDECK_LLAMA_SERVER"]), model)
    write_preset(root / "config", image, free_port())
    try:
        floor = subprocess.Popen([sys.executable, "-c", BARE_LOOP])
        try:
            time.sleep(3)
            bare = cpu_share(floor.pid, args.seconds)
        finally:
            floor.kill()
            floor.wait()
        print(
            f"baseline, a bare Python loop reading /proc/meminfo at 1 Hz: {bare:.2f} % of a "
            f"core over {args.seconds:g} s"
        )
        assert cli(env, "service", "start").returncode == 0
        pid = service_pid(env)
        time.sleep(5)
        idle = cpu_share(pid, args.seconds)
        print(
            f"idle, no engine: {idle:.2f} % of a core over {args.seconds:g} s, "
            f"RSS {rss_mib(pid):.1f} MiB"
        )
        launched = cli(env, "launch", "bench-svc", "--no-flush", "--timeout", "60")
        assert launched.returncode == 0, launched.stderr
        time.sleep(5)
        busy = cpu_share(pid, args.seconds)
        print(
            f"engine running (watchdog + telemetry + metrics at 1 Hz): {busy:.2f} % of a "
            f"core over {args.seconds:g} s, RSS {rss_mib(pid):.1f} MiB"
        )
        cli(env, "stop")
        cli(env, "service", "stop")

        memory = read_meminfo()
        hog_size = min(2 * GIB, memory.available // 8) // 4096 * 4096
        threshold = memory.available - hog_size // 2
        stop_pct = 100 * threshold / memory.total
        (root / "config" / "settings.toml").write_text(
            f"[guard]\nstop_available_pct = {stop_pct:.3f}\n"
            f"warn_available_pct = {min(stop_pct + 1.0, 99.0):.3f}\n"
        )
        assert cli(env, "service", "start").returncode == 0
        runs = [stop_latency(env, client, scope, hog_size, threshold) for _ in range(args.runs)]
        for name, latencies in (
            ("engine stopped (its process gone)", [k for k, _ in runs]),
            ("container removed (gone from Docker)", [g for _, g in runs]),
        ):
            print(
                f"threshold crossed -> {name}, with the service ({args.runs} runs, hog "
                f"{hog_size / GIB:.2f} GiB): median {statistics.median(latencies):.2f} s, "
                f"max {max(latencies):.2f} s ({', '.join(f'{x:.2f}' for x in latencies)})"
            )
    finally:
        clean_up(env, client, scope)
    return 0


if __name__ == "__main__":
    sys.exit(main())
