"""When Docker or the engine hangs, every call a user waits on ends within its stated time
and says what is happening (issue 11, item 9).

Docker: the test's OWN private dockerd (`.ci/dockerd.sh`), SIGSTOPped and resumed; the shared
daemon is never paused. The engine: a real llama-server container frozen with
`docker kill --signal STOP` on the shared daemon, in the test's own scope.
Each figure is asserted at its constant plus a small slack for a busy machine, never at the
old 30 s or 5 min.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import docker
import pytest

from sparkdeck.catalog import load_catalog
from sparkdeck.chat.client import LOOKUP_TIMEOUT_S
from sparkdeck.runtime.client import DockerRuntime
from sparkdeck.runtime.errors import DOCKER_TIMEOUT_S, DockerNotAnswering
from sparkdeck.ui.app import SparkdeckApp
from tests.conftest import busybox_preset, free_port, llama_preset_fields, unavailable, write_preset
from tests.support.images import ensure_busybox_image
from tests.support.offline_app import engine_text
from tests.support.pane_host import wait_until
from tests.support.paused_process import stopped

REPO = Path(__file__).resolve().parents[2]
PROBE_TIMEOUT_S = 3.0  # sparkdeck.endpoints.probe's per-request bound
SLACK_S = 2.0  # a busy 2-core machine: scheduling, not waiting on Docker
NOT_ANSWERING = f"Docker is not answering (no reply within {DOCKER_TIMEOUT_S:g} s)"


# ----- the test's own Docker daemon -------------------------------------------------------


class PrivateDaemon:
    """A dockerd of this module's own, which the tests may pause (SIGSTOP) and resume."""

    def __init__(self, directory: Path):
        self.directory = directory
        self.host = ""

    def start(self) -> None:
        done = subprocess.run(
            # no iptables of its own: .ci/dockerd.sh says why
            [
                "bash",
                str(REPO / ".ci/dockerd.sh"),
                "start",
                str(self.directory),
                "--iptables=false",
            ],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        if done.returncode != 0:
            unavailable(f"cannot start a private dockerd: {done.stderr[-500:]}")
        self.host = done.stdout.strip().splitlines()[-1]

    @property
    def pid(self) -> int:
        return int((self.directory / "dockerd.pid").read_text())

    @contextmanager
    def paused(self) -> Iterator[None]:
        with stopped(self.pid):  # every thread stopped, not just signalled
            yield

    def stop(self) -> None:
        try:
            os.kill(self.pid, signal.SIGCONT)  # a paused daemon cannot shut down
        except (OSError, ValueError):
            pass
        subprocess.run(
            ["bash", str(REPO / ".ci/dockerd.sh"), "stop", str(self.directory)],
            capture_output=True,
            timeout=60,
            check=False,
        )
        shutil.rmtree(self.directory, ignore_errors=True)


@pytest.fixture(scope="module")
def private_daemon() -> Iterator[PrivateDaemon]:
    if os.geteuid() != 0 or not shutil.which("dockerd"):
        unavailable("a private dockerd needs root and dockerd")
    # short: containerd's socket paths under it must stay below 108 characters
    daemon = PrivateDaemon(Path(f"/tmp/sdh-{uuid.uuid4().hex[:8]}"))
    daemon.start()
    try:
        yield daemon
    finally:
        daemon.stop()


@pytest.fixture(scope="module")
def private_client(private_daemon: PrivateDaemon) -> Iterator[docker.DockerClient]:
    client = docker.DockerClient(base_url=private_daemon.host, timeout=60)
    yield client
    client.close()


@pytest.fixture(scope="module")
def private_busybox(private_client: docker.DockerClient) -> str:
    busybox = shutil.which("busybox") or "/bin/busybox"
    if not Path(busybox).is_file():
        unavailable("no static busybox: apt-get install busybox-static")
    return ensure_busybox_image(private_client, Path(busybox))


def sparkdeck_cli(*args: str, docker_host: str) -> tuple[subprocess.CompletedProcess[str], float]:
    env = {**os.environ, "DOCKER_HOST": docker_host}
    started = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-m", "sparkdeck", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        check=False,
    )
    return done, time.monotonic() - started


# ----- Docker does not answer -------------------------------------------------------------


@pytest.mark.docker
def test_reads_say_docker_is_not_answering_within_the_timeout(private_daemon):
    runtime = DockerRuntime.connect(base_url=private_daemon.host, scope="h" + uuid.uuid4().hex[:8])
    assert runtime.current() is None  # it answers while running
    with private_daemon.paused():
        for read in (runtime.current, lambda: DockerRuntime.connect(base_url=private_daemon.host)):
            started = time.monotonic()
            with pytest.raises(DockerNotAnswering) as caught:
                read()
            elapsed = time.monotonic() - started
            assert elapsed <= DOCKER_TIMEOUT_S + SLACK_S, elapsed
            assert str(caught.value).startswith(NOT_ANSWERING)
            assert "memory guard keeps watching" in str(caught.value)
    assert runtime.current() is None  # and it reads again once the daemon is back


@pytest.mark.docker
def test_status_returns_within_the_timeout_with_one_line(private_daemon):
    # What starting Python and sparkdeck costs on this machine now, apart from Docker.
    _, baseline = sparkdeck_cli("presets", "--json", docker_host=private_daemon.host)
    with private_daemon.paused():
        done, elapsed = sparkdeck_cli("status", docker_host=private_daemon.host)
    assert done.returncode == 0, done.stderr
    assert elapsed - baseline <= DOCKER_TIMEOUT_S + SLACK_S, (elapsed, baseline)
    docker_line = next(line for line in done.stdout.splitlines() if line.startswith("docker:"))
    assert NOT_ANSWERING in docker_line
    assert "Traceback" not in done.stderr and "Read timed out" not in done.stdout


@pytest.mark.docker
@pytest.mark.in_process_owner(
    "the window reads a private dockerd the test pauses, through the runtime it is handed; "
    "a service would read DOCKER_HOST's daemon, not this one"
)
@pytest.mark.anyio
async def test_engine_card_says_docker_is_not_answering_and_s_answers(
    private_daemon, private_busybox, tmp_path
):
    scope = "h" + uuid.uuid4().hex[:8]
    preset = busybox_preset(
        tmp_path, "paused-web", private_busybox, "exec httpd -f -p 8080 -h /www"
    )
    launcher_runtime = DockerRuntime.connect(base_url=private_daemon.host, scope=scope)
    launcher_runtime.start(preset.container_spec())
    app = SparkdeckApp(
        lambda: load_catalog([(tmp_path / "presets", False)]),
        lambda: DockerRuntime.connect(base_url=private_daemon.host, scope=scope),
        flush=False,
        engine_poll_seconds=0.5,
    )

    def toasts() -> list[str]:
        return [str(t.render()) for t in app.screen.query("Toast")]

    async def scenario() -> None:
        async with app.run_test(size=(120, 40), notifications=True) as pilot:
            await wait_until(
                pilot,
                lambda: "state    ready" in engine_text(app) and "uptime" in engine_text(app),
                timeout=60.0,
                what="the engine ready",
            )
            with private_daemon.paused():
                paused = time.monotonic()
                await wait_until(
                    pilot,
                    lambda: "Docker is not answering" in engine_text(app),
                    timeout=30.0,
                    what="the card to say Docker is not answering",
                )
                # one poll in flight (0.5 s period) plus its 5 s timeout
                assert time.monotonic() - paused <= 0.5 + DOCKER_TIMEOUT_S + 2 * SLACK_S
                card = engine_text(app)
                assert "ready" not in card and "uptime" not in card, card
                assert "paused-web" in card  # as "last seen", not as a state
                await pilot.pause(1.5)
                assert engine_text(app) == card  # nothing ticks that cannot be known
                await pilot.press("s")
                await wait_until(
                    pilot,
                    lambda: any("Docker is not answering" in t for t in toasts()),
                    timeout=2.0,
                    what="an answer to s",
                )
                await wait_until(
                    pilot,
                    lambda: any(
                        t.startswith("plan stop failed") and NOT_ANSWERING in t for t in toasts()
                    ),
                    timeout=DOCKER_TIMEOUT_S + SLACK_S,
                    what="the stop's failure, said plainly, within one timeout",
                )
                assert not any(
                    "Read timed out" in t or "UnixHTTPConnectionPool" in t for t in toasts()
                )
            await wait_until(
                pilot,
                lambda: "state    ready" in engine_text(app),
                timeout=30.0,
                what="the card back once Docker answers",
            )

    try:
        await scenario()
    finally:
        for container in launcher_runtime.client.containers.list(
            all=True, filters={"label": f"io.sparkdeck.scope={scope}"}
        ):
            container.remove(force=True)


# ----- the engine does not answer ---------------------------------------------------------


@pytest.fixture
def frozen_llama(tmp_path, runtime, llama_image, docker_client) -> Iterator[str]:
    """A real llama-server container of this test's scope, ready, then SIGSTOPped."""
    port = free_port()
    write_preset(tmp_path / "presets", "frozen", **llama_preset_fields(llama_image, port))
    preset = load_catalog([(tmp_path / "presets", False)]).get("frozen")
    engine = runtime.wait_ready(runtime.start(preset.container_spec()), 60.0)
    docker_client.api.kill(engine.container_id, signal="SIGSTOP")
    try:
        yield engine.base_url
    finally:
        try:
            docker_client.api.kill(engine.container_id, signal="SIGCONT")
        except docker.errors.APIError:
            pass


@pytest.mark.docker
@pytest.mark.llama
def test_chat_and_bench_say_the_engine_is_not_answering(frozen_llama):
    host = os.environ.get("DOCKER_HOST", "")
    _, baseline = sparkdeck_cli("presets", "--json", docker_host=host)
    for command in (
        ["chat", "hello", "--max-tokens", "4"],
        ["bench", "--runs", "1", "--output-tokens", "4"],
    ):
        done, elapsed = sparkdeck_cli(
            *command, "--endpoint", frozen_llama, "--kind", "llamacpp", docker_host=host
        )
        assert done.returncode == 1, (command, done.stdout, done.stderr)
        assert elapsed - baseline <= LOOKUP_TIMEOUT_S + 2 * SLACK_S, (command, elapsed, baseline)
        assert (
            f"the engine is not answering (no reply from {frozen_llama}/v1/models within "
            f"{LOOKUP_TIMEOUT_S:g} s)"
        ) in done.stderr, (command, done.stderr)
        assert "Traceback" not in done.stderr

    # Without --kind the kind is probed first: one silent path is enough to say so.
    done, elapsed = sparkdeck_cli("chat", "hello", "--endpoint", frozen_llama, docker_host=host)
    assert done.returncode == 1, (done.stdout, done.stderr)
    assert elapsed - baseline <= PROBE_TIMEOUT_S + 2 * SLACK_S, (elapsed, baseline)
    assert f"the engine is not answering (no reply from {frozen_llama}/" in done.stderr
