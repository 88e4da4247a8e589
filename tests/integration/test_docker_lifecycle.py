"""The engine lifecycle on a real Docker daemon with a real llama-server container."""

from __future__ import annotations

import json
import socket
import time
from pathlib import Path

import docker
import httpx
import pytest

from sparkdeck.launch.sequence import ContainerStarted, EngineReady, Launcher, PreviousStopped
from sparkdeck.presets import load_file
from sparkdeck.runtime.client import DockerRuntime
from sparkdeck.runtime.errors import (
    EngineExited,
    ImagePullError,
    LaunchError,
    NotManaged,
)
from sparkdeck.runtime.pull import PullProgress
from tests.conftest import (
    base_fields,
    free_port,
    host_memlock,
    llama_preset_fields,
    scope_containers,
    unavailable,
    write_preset,
)
from tests.support.sse_lines import sse_lines

pytestmark = [pytest.mark.docker]


def _preset(tmp_path: Path, preset_id: str, **fields):
    return load_file(write_preset(tmp_path / "presets", preset_id, **fields))


def _launcher(runtime: DockerRuntime, events: list | None = None) -> Launcher:
    sink = events.append if events is not None else None
    return Launcher(runtime, on_event=sink, stop_grace=5)


@pytest.mark.llama
def test_launch_ready_chat_metrics_stop(runtime, docker_client, scope, tmp_path, llama_image):
    port = free_port()
    preset = _preset(tmp_path, "tiny", **llama_preset_fields(llama_image, port))
    events: list = []
    engine = _launcher(runtime, events).launch(preset, flush=False)

    assert engine.docker_state == "running"
    assert engine.base_url == f"http://127.0.0.1:{port}"
    assert [type(e) for e in events if isinstance(e, (ContainerStarted, EngineReady))] == [
        ContainerStarted,
        EngineReady,
    ]
    # published on loopback only, with sparkdeck's labels and the ulimits a Spark engine needs
    attrs = docker_client.containers.get(engine.container_id).attrs
    binding = attrs["HostConfig"]["PortBindings"]["8080/tcp"][0]
    assert binding == {"HostIp": "127.0.0.1", "HostPort": str(port)}
    labels = attrs["Config"]["Labels"]
    assert labels["io.sparkdeck.managed"] == "true"
    assert labels["io.sparkdeck.preset"] == "tiny"
    assert labels["io.sparkdeck.spec-hash"] == preset.container_spec().spec_hash()
    ulimits = {u["Name"]: u["Soft"] for u in attrs["HostConfig"]["Ulimits"]}
    assert ulimits == {"memlock": host_memlock(), "stack": 64 * 1024 * 1024}
    assert attrs["HostConfig"]["DeviceRequests"] in (None, [])  # gpus = false in the preset

    # one streamed chat token over the real OpenAI API
    body = {
        "model": "tiny",
        "stream": True,
        "max_tokens": 4,
        "messages": [{"role": "user", "content": "hello"}],
    }
    content_chunks = 0
    with httpx.stream(
        "POST", engine.base_url + "/v1/chat/completions", json=body, timeout=30
    ) as response:
        assert response.status_code == 200
        for line in sse_lines(response):
            if line.startswith("data: ") and line != "data: [DONE]":
                delta = (
                    json.loads(line[6:])["choices"][0]["delta"]
                    if json.loads(line[6:]).get("choices")
                    else {}
                )
                content_chunks += bool(delta.get("content"))
    assert content_chunks >= 1

    metrics = httpx.get(engine.base_url + "/metrics", timeout=10)
    assert metrics.status_code == 200
    assert "llamacpp:tokens_predicted_total" in metrics.text

    runtime.stop(engine.container_id, grace=5)
    assert scope_containers(docker_client, scope) == []
    with pytest.raises(httpx.TransportError):
        httpx.get(engine.base_url + "/health", timeout=2)


@pytest.mark.llama
def test_adopt_running_engine_from_a_new_runtime(
    runtime, docker_client, scope, tmp_path, llama_image
):
    port = free_port()
    preset = _preset(tmp_path, "adoptee", **llama_preset_fields(llama_image, port))
    launched = _launcher(runtime).launch(preset, flush=False)

    # a fresh client and runtime, as when sparkdeck starts again
    fresh = DockerRuntime(docker.from_env(), scope=scope)
    adopted = fresh.current()
    assert adopted is not None
    assert (adopted.container_id, adopted.preset_id, adopted.base_url, adopted.kind) == (
        launched.container_id,
        "adoptee",
        f"http://127.0.0.1:{port}",
        "llamacpp",
    )
    assert adopted.metrics_path == "/metrics" and adopted.alive
    fresh.stop(adopted.container_id, grace=5)
    assert scope_containers(docker_client, scope) == []


def test_crash_shows_exit_code_and_log_tail(runtime, docker_client, scope, tmp_path, busybox_image):
    """A running engine that dies on its own is seen as crashed, code and last lines kept."""
    # Docker stamps stdout and stderr in separate goroutines, so lines written in the same
    # instant on both streams have no reliable order; the pause keeps this one unambiguous.
    script = (
        "for i in $(seq 1 80); do echo line $i; done; sleep 0.5; "
        "echo 'fatal: out of memory' >&2; exit 3"
    )
    preset = _preset(
        tmp_path,
        "crasher",
        title="crasher",
        kind="openai",
        image=busybox_image,
        port=free_port(),
        **base_fields(),
        openai={"container_port": 8080, "entrypoint": ["/bin/sh", "-c", script]},
    )
    started = runtime.start(preset.container_spec())
    final = runtime.wait_exit(started.container_id, timeout=30)
    assert final.crashed and final.exit_code == 3
    assert final.log_tail[-1] == "fatal: out of memory"
    assert len(final.log_tail) == 50  # the last 50 lines, not all 81
    current = runtime.current()
    assert current is not None and current.crashed and current.exit_code == 3


def test_crash_during_launch_is_reported_and_cleaned_up(
    runtime, docker_client, scope, tmp_path, busybox_image
):
    preset = _preset(
        tmp_path,
        "dies",
        title="dies",
        kind="openai",
        image=busybox_image,
        port=free_port(),
        **base_fields(),
        openai={
            "container_port": 8080,
            "entrypoint": ["/bin/sh", "-c", "echo cannot load model; exit 3"],
        },
    )
    with pytest.raises(EngineExited) as info:
        _launcher(runtime).launch(preset, flush=False)
    assert info.value.exit_code == 3
    assert "cannot load model" in info.value.log_tail
    assert scope_containers(docker_client, scope) == []


def test_pull_without_registry_fails_fast_and_clearly(runtime):
    events: list[PullProgress] = []
    started = time.monotonic()
    with pytest.raises(ImagePullError) as info:
        runtime.pull("docker.io/sparkdeck/does-not-exist:1.0", on_progress=events.append)
    elapsed = time.monotonic() - started
    assert elapsed < 1.0, f"pull failure took {elapsed:.2f} s"
    message = str(info.value)
    assert "docker.io/sparkdeck/does-not-exist:1.0" in message
    assert "unreachable" in message or "does not exist" in message


@pytest.mark.llama
def test_failed_pull_leaves_the_running_engine_alone(
    runtime, docker_client, scope, tmp_path, llama_image
):
    first = _launcher(runtime).launch(
        _preset(tmp_path, "keeper", **llama_preset_fields(llama_image, free_port())), flush=False
    )
    missing = _preset(
        tmp_path,
        "unpullable",
        **llama_preset_fields("docker.io/sparkdeck/does-not-exist:1.0", free_port()),
    )
    with pytest.raises(ImagePullError):
        _launcher(runtime).launch(missing, flush=False)
    assert runtime.inspect(first.container_id).docker_state == "running"
    assert [c.id for c in scope_containers(docker_client, scope)] == [first.container_id]


@pytest.mark.llama
def test_gpu_request_without_nvidia_runtime(runtime, docker_client, scope, tmp_path, llama_image):
    preset = _preset(
        tmp_path, "wants-gpu", **llama_preset_fields(llama_image, free_port(), gpus=True)
    )
    with pytest.raises(LaunchError) as info:
        _launcher(runtime).launch(preset, flush=False)
    assert "NVIDIA container runtime" in str(info.value)
    assert "gpus = false" in str(info.value)
    assert scope_containers(docker_client, scope) == []


@pytest.mark.llama
def test_port_taken_by_another_program(runtime, docker_client, scope, tmp_path, llama_image):
    with socket.socket() as blocker:
        blocker.bind(("127.0.0.1", 0))
        blocker.listen()
        port = blocker.getsockname()[1]
        preset = _preset(tmp_path, "clash", **llama_preset_fields(llama_image, port))
        with pytest.raises(LaunchError) as info:
            _launcher(runtime).launch(preset, flush=False)
    assert f"port {port} on 127.0.0.1 is already in use" in str(info.value)
    assert scope_containers(docker_client, scope) == []


@pytest.mark.llama
def test_port_taken_by_another_container(runtime, docker_client, scope, tmp_path, llama_image):
    port = free_port()
    first = runtime.start(
        _preset(tmp_path, "one", **llama_preset_fields(llama_image, port)).container_spec()
    )
    with pytest.raises(LaunchError) as info:
        runtime.start(
            _preset(tmp_path, "two", **llama_preset_fields(llama_image, port)).container_spec()
        )
    assert f"port {port}" in str(info.value) and "already in use" in str(info.value)
    assert [c.id for c in scope_containers(docker_client, scope)] == [first.container_id]


def test_missing_command_in_image(runtime, docker_client, scope, tmp_path, busybox_image):
    preset = _preset(
        tmp_path,
        "nocmd",
        title="no command",
        kind="openai",
        image=busybox_image,
        port=free_port(),
        **base_fields(),
        openai={"container_port": 8080, "entrypoint": ["/opt/engine/serve"]},
    )
    with pytest.raises(LaunchError) as info:
        runtime.start(preset.container_spec())
    assert "'/opt/engine/serve' does not exist in image" in str(info.value)
    assert scope_containers(docker_client, scope) == []


@pytest.mark.llama
def test_switch_stops_the_first_before_the_second_starts(
    runtime, docker_client, scope, tmp_path, llama_image
):
    port_a, port_b = free_port(), free_port()
    first = _launcher(runtime).launch(
        _preset(tmp_path, "first", **llama_preset_fields(llama_image, port_a)), flush=False
    )
    seen_when_second_started: dict[str, object] = {}

    def on_event(event: object) -> None:
        events.append(event)
        if isinstance(event, ContainerStarted):
            ids = {c.id for c in scope_containers(docker_client, scope)}
            seen_when_second_started["first_exists"] = first.container_id in ids
            try:
                httpx.get(first.base_url + "/health", timeout=1)
                seen_when_second_started["first_answers"] = True
            except httpx.TransportError:
                seen_when_second_started["first_answers"] = False

    events: list = []
    second = Launcher(runtime, on_event=on_event, stop_grace=5).launch(
        _preset(tmp_path, "second", **llama_preset_fields(llama_image, port_b)), flush=False
    )
    kinds = [type(e).__name__ for e in events]
    assert kinds.index("PreviousStopped") < kinds.index("ContainerStarted")
    stopped = [e for e in events if isinstance(e, PreviousStopped)]
    assert [e.engine.container_id for e in stopped] == [first.container_id]
    assert seen_when_second_started == {"first_exists": False, "first_answers": False}
    assert [c.id for c in scope_containers(docker_client, scope)] == [second.container_id]


def test_never_stops_a_container_without_the_label(runtime, docker_client, busybox_image):
    stranger = docker_client.containers.run(
        busybox_image, ["sleep", "60"], detach=True, labels={"purpose": "not sparkdeck's"}
    )
    try:
        with pytest.raises(NotManaged):
            runtime.stop(stranger.id)
        with pytest.raises(NotManaged):
            runtime.wait_exit(stranger.id, timeout=1)
        assert runtime.engines() == []
        # a launch in this scope stops only its own containers
        Launcher(runtime).stop_all()
        stranger.reload()
        assert stranger.status == "running"
    finally:
        stranger.remove(force=True)


def test_container_of_another_scope_is_not_ours(runtime, docker_client, tmp_path, busybox_image):
    other = DockerRuntime(docker_client, scope=runtime.scope + "x")
    preset = _preset(
        tmp_path,
        "other",
        title="other",
        kind="openai",
        image=busybox_image,
        port=free_port(),
        **base_fields(),
        openai={"container_port": 8080, "entrypoint": ["sleep", "60"]},
    )
    theirs = other.start(preset.container_spec())
    try:
        assert runtime.engines() == []
        with pytest.raises(NotManaged):
            runtime.stop(theirs.container_id)
    finally:
        other.stop(theirs.container_id, grace=0)


def test_memlock_the_daemon_cannot_grant(runtime, docker_client, scope, tmp_path, busybox_image):
    if host_memlock() == -1:
        # CI's machines give dockerd a finite limit (8 MiB here): unlimited there means the
        # refusal went untested, so under SPARKDECK_REQUIRE_REAL_PARTS it fails.
        unavailable("this host's dockerd may lock unlimited memory: nothing to refuse")
    preset = _preset(
        tmp_path,
        "lockall",
        title="lock all",
        kind="openai",
        image=busybox_image,
        port=free_port(),
        **base_fields(memlock=-1),
        openai={"container_port": 8080, "entrypoint": ["sleep", "5"]},
    )
    with pytest.raises(LaunchError) as info:
        runtime.start(preset.container_spec())
    assert "locked memory (memlock)" in str(info.value)
    assert scope_containers(docker_client, scope) == []
