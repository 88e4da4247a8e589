"""Time from the watchdog's stop threshold being crossed to the engine container being stopped.

Runs the real Watchdog loop (as `sparkdeck launch` and `sparkdeck guard` run it) against the
real Docker daemon (DOCKER_HOST) with a real container of sparkdeck's (busybox, labelled and
scoped like any engine). The reading source is this machine's real /proc readings, with
MemAvailable replaced by 3 % of MemTotal from a moment chosen at random within the sampling
period (a FAKE crossing: this machine cannot be driven out of memory safely). Measured: from
that moment until DockerRuntime.stop has returned and Docker no longer lists the container.

  DOCKER_HOST=unix:///tmp/sdd/docker.sock .venv/bin/python benchmarks/guard_stop_latency.py

With --paused-daemon (root; starts a private dockerd of its own with .ci/dockerd.sh, since it
SIGSTOPs it): the daemon is stopped at the crossing, as a host out of memory stalls it. Then
measured: from the crossing until the container's processes are dead (the stop action kills
them directly, found through /proc cgroups), and, with the daemon resumed 3 s after the
crossing, until Docker confirms the container removed.
"""

from __future__ import annotations

import argparse
import os
import random
import resource
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from sparkdeck.config.settings import GuardSettings
from sparkdeck.guard.policy import WatchdogPolicy
from sparkdeck.guard.readings import HostReadings, Reading
from sparkdeck.guard.stopper import ContainerStopper, container_pids
from sparkdeck.guard.watchdog import Watchdog
from sparkdeck.runtime.client import DockerRuntime
from sparkdeck.runtime.spec import ContainerSpec, PortBinding
from tests.support.images import ensure_busybox_image


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


def _spec(image: str) -> ContainerSpec:
    return ContainerSpec(
        preset_id=f"bench-{uuid.uuid4().hex[:6]}",
        kind="openai",
        image=image,
        command=(),
        entrypoint=("/bin/sh", "-c", "sleep 600"),
        port=PortBinding(8080, None, "127.0.0.1"),
        health_path="/",
        metrics_path=None,
        env=(),
        pass_env=(),
        mounts=(),
        files=(),
        gpus=False,
        ipc_mode=None,
        shm_size=None,
        startup_timeout=60.0,
        memlock=_memlock(),
        model="",
    )


def one_run(runtime: DockerRuntime, image: str, hz: float) -> float:
    engine = runtime.start(_spec(image))
    crossing_at = time.monotonic() + 1.0 + random.uniform(0, 1.0 / hz)
    dog = Watchdog(
        WatchdogPolicy(GuardSettings()),
        Crossing(crossing_at),
        ContainerStopper.for_engine(runtime, engine.container_id),
        engine=engine.name,
        record=lambda *args, **kwargs: None,
    )
    done = threading.Event()
    dog.run(done, lambda: hz)
    gone = not any(e.container_id == engine.container_id for e in runtime.engines())
    assert gone and dog.stopped_at is not None
    return dog.stopped_at - crossing_at


def one_paused_run(
    runtime: DockerRuntime, image: str, hz: float, daemon_pid: int
) -> tuple[float, float]:
    """(crossing -> processes dead, crossing -> removal confirmed) with dockerd SIGSTOPped at
    the crossing and SIGCONTed 3 s after it."""
    engine = runtime.start(_spec(image))
    pids = container_pids(engine.container_id)
    crossing_at = time.monotonic() + 1.0 + random.uniform(0, 1.0 / hz)
    dog = Watchdog(
        WatchdogPolicy(GuardSettings()),
        Crossing(crossing_at),
        ContainerStopper.for_engine(runtime, engine.container_id),
        engine=engine.name,
        record=lambda *args, **kwargs: None,
    )
    done = threading.Event()
    thread = threading.Thread(target=dog.run, args=(done, lambda: hz), daemon=True)
    thread.start()
    time.sleep(max(0.0, crossing_at - time.monotonic()))
    os.kill(daemon_pid, signal.SIGSTOP)
    try:
        while any(_alive(pid) for pid in pids) and time.monotonic() - crossing_at < 30:
            time.sleep(0.01)
        dead = time.monotonic() - crossing_at
        time.sleep(max(0.0, crossing_at + 3.0 - time.monotonic()))
    finally:
        os.kill(daemon_pid, signal.SIGCONT)
    thread.join(timeout=60)
    done.set()
    assert dog.stopped_at is not None, "the stop was not confirmed after the daemon resumed"
    return dead, dog.stopped_at - crossing_at


def _alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def paused_daemon(runs: int) -> int:
    """The paused-daemon figures, on a private dockerd started (and stopped) here."""
    repo = Path(__file__).resolve().parents[1]
    directory = Path(tempfile.mkdtemp(prefix="sdb", dir="/tmp"))
    script = repo / ".ci" / "dockerd.sh"
    host = (
        subprocess.run(
            ["bash", str(script), "start", str(directory)],
            check=True,
            capture_output=True,
            text=True,
        )
        .stdout.strip()
        .splitlines()[-1]
    )
    daemon_pid = int((directory / "dockerd.pid").read_text())
    try:
        runtime = DockerRuntime.connect(base_url=host, scope="bench" + uuid.uuid4().hex[:8])
        runtime.files_dir = Path(tempfile.mkdtemp())
        image = ensure_busybox_image(
            runtime.client, Path(shutil.which("busybox") or "/bin/busybox")
        )
        hz = GuardSettings().running_hz
        results = [one_paused_run(runtime, image, hz, daemon_pid) for _ in range(runs)]
        dead = [r[0] for r in results]
        removed = [r[1] for r in results]
        print(
            f"daemon paused at the crossing (running, {hz:g} Hz), {runs} runs: processes "
            f"dead median {statistics.median(dead):.2f} s, max {max(dead):.2f} s "
            f"(target <= 2 s: {'met' if max(dead) <= 2.0 else 'NOT met'}); daemon resumed "
            f"at 3 s, container removed median {statistics.median(removed):.2f} s, "
            f"max {max(removed):.2f} s"
        )
    finally:
        os.kill(daemon_pid, signal.SIGCONT)
        subprocess.run(["bash", str(script), "stop", str(directory)], check=False)
        shutil.rmtree(directory, ignore_errors=True)
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument(
        "--paused-daemon",
        action="store_true",
        help="measure with a private dockerd SIGSTOPped at the crossing",
    )
    args = parser.parse_args()
    if args.paused_daemon:
        return paused_daemon(args.runs)
    runtime = DockerRuntime.connect(scope="bench" + uuid.uuid4().hex[:8])
    runtime.files_dir = Path(tempfile.mkdtemp())
    busybox = shutil.which("busybox") or "/bin/busybox"
    image = ensure_busybox_image(runtime.client, Path(busybox))
    try:
        for label, hz in (
            ("start-up (2 Hz)", GuardSettings().startup_hz),
            ("running (1 Hz)", GuardSettings().running_hz),
        ):
            times = [one_run(runtime, image, hz) for _ in range(args.runs)]
            print(
                f"{label}: threshold crossed -> container stopped and removed, "
                f"{args.runs} runs: median {statistics.median(times):.2f} s, "
                f"max {max(times):.2f} s, min {min(times):.2f} s "
                f"(target <= 2 s: {'met' if max(times) <= 2.0 else 'NOT met'})"
            )
    finally:
        for engine in runtime.engines():
            runtime.stop(engine.container_id, grace=0)
    return 0


if __name__ == "__main__":
    sys.exit(main())
