"""Time from the watchdog's stop threshold being crossed to the engine container being stopped.

Runs the real Watchdog loop (as `sparkdeck launch` and `sparkdeck guard` run it) against the
real Docker daemon (DOCKER_HOST) with a real container of sparkdeck's (busybox, labelled and
scoped like any engine). The reading source is this machine's real /proc readings, with
MemAvailable replaced by 3 % of MemTotal from a moment chosen at random within the sampling
period (a FAKE crossing: this machine cannot be driven out of memory safely). Measured: from
that moment until DockerRuntime.stop has returned and Docker no longer lists the container.

  DOCKER_HOST=unix:///tmp/sdd/docker.sock .venv/bin/python benchmarks/guard_stop_latency.py
"""

from __future__ import annotations

import argparse
import random
import resource
import shutil
import statistics
import sys
import tempfile
import threading
import time
import uuid
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from sparkdeck.container_spec import ContainerSpec, PortBinding  # noqa: E402
from sparkdeck.docker_runtime import DockerRuntime  # noqa: E402
from sparkdeck.guard.policy import WatchdogPolicy  # noqa: E402
from sparkdeck.guard.readings import HostReadings, Reading  # noqa: E402
from sparkdeck.guard.watchdog import Watchdog  # noqa: E402
from sparkdeck.settings import GuardSettings  # noqa: E402
from tests.support.images import ensure_busybox_image  # noqa: E402


class Crossing:
    """Real readings; MemAvailable at 3 % of MemTotal once `at` (monotonic) has passed."""

    def __init__(self, at: float):
        self.at, self.real = at, HostReadings()

    def __call__(self) -> Reading:
        reading = self.real()
        if reading.t < self.at:
            return reading
        low = int(reading.memory.total * 0.03)
        return replace(reading, memory=replace(reading.memory, available=low, free=low))


def _memlock() -> int:
    """What this host lets dockerd grant (sparkdeck's own default, -1, needs CAP_SYS_RESOURCE)."""
    hard = resource.getrlimit(resource.RLIMIT_MEMLOCK)[1]
    return -1 if hard == resource.RLIM_INFINITY else hard


def one_run(runtime: DockerRuntime, image: str, hz: float) -> float:
    spec = ContainerSpec(preset_id=f"bench-{uuid.uuid4().hex[:6]}", kind="openai", image=image,
                         command=(), entrypoint=("/bin/sh", "-c", "sleep 600"),
                         port=PortBinding(8080, None, "127.0.0.1"), health_path="/",
                         metrics_path=None, env=(), pass_env=(), mounts=(), files=(),
                         gpus=False, ipc_mode=None, shm_size=None, startup_timeout=60.0,
                         memlock=_memlock(), model="")
    engine = runtime.start(spec)
    crossing_at = time.monotonic() + 1.0 + random.uniform(0, 1.0 / hz)
    dog = Watchdog(WatchdogPolicy(GuardSettings()), Crossing(crossing_at),
                   lambda: runtime.stop(engine.container_id, grace=0), engine=engine.name,
                   record=lambda *args: None)
    done = threading.Event()
    dog.run(done, lambda: hz)
    gone = not any(e.container_id == engine.container_id for e in runtime.engines())
    assert gone and dog.stopped_at is not None
    return dog.stopped_at - crossing_at


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=7)
    args = parser.parse_args()
    runtime = DockerRuntime.connect(scope="bench" + uuid.uuid4().hex[:8])
    runtime.files_dir = Path(tempfile.mkdtemp())
    busybox = shutil.which("busybox") or "/bin/busybox"
    image = ensure_busybox_image(runtime.client, Path(busybox))
    try:
        for label, hz in (("start-up (2 Hz)", GuardSettings().startup_hz),
                          ("running (1 Hz)", GuardSettings().running_hz)):
            times = [one_run(runtime, image, hz) for _ in range(args.runs)]
            print(f"{label}: threshold crossed -> container stopped and removed, "
                  f"{args.runs} runs: median {statistics.median(times):.2f} s, "
                  f"max {max(times):.2f} s, min {min(times):.2f} s "
                  f"(target <= 2 s: {'met' if max(times) <= 2.0 else 'NOT met'})")
    finally:
        for engine in runtime.engines():
            runtime.stop(engine.container_id, grace=0)
    return 0


if __name__ == "__main__":
    sys.exit(main())
