"""The CLI as a user runs it (a subprocess), against the real Docker daemon and llama-server."""

from __future__ import annotations

import json
import os
from pathlib import Path

import httpx
import pytest

from tests.conftest import (
    free_port,
    llama_preset_fields,
    scope_containers,
    write_preset,
)
from tests.support.cli import run_cli
from tests.support.cli_env import SECRET, cli_env  # noqa: F401 - a fixture

pytestmark = [pytest.mark.docker, pytest.mark.llama]


def test_launch_status_logs_stop(cli_env, isolated_dirs, scope, docker_client, llama_image):
    port = free_port()
    presets = isolated_dirs["config"] / "presets"
    write_preset(
        presets, "cli-tiny", **llama_preset_fields(llama_image, port, pass_env=["HF_TOKEN"])
    )
    launched = run_cli("launch", "cli-tiny", "--no-flush", "--timeout", "60", env=cli_env)
    assert launched.returncode == 0, launched.stderr
    assert "ready in" in launched.stdout and f"http://127.0.0.1:{port}" in launched.stdout
    assert httpx.get(f"http://127.0.0.1:{port}/health", timeout=5).status_code == 200

    # the secret reached the container's environment, and nowhere sparkdeck writes or shows
    (container,) = scope_containers(docker_client, scope)
    assert f"HF_TOKEN={SECRET}" in container.attrs["Config"]["Env"]
    status = run_cli("status", "--json", env=cli_env)
    assert status.returncode == 0
    report = json.loads(status.stdout)
    assert report["engine"]["preset_id"] == "cli-tiny"
    assert report["engine"]["docker_state"] == "running"
    assert report["docker"]["available"] is True
    logs = run_cli("logs", "--tail", "200", env=cli_env)
    assert logs.returncode == 0 and "llama" in logs.stdout.lower()
    for text in (launched.stdout, launched.stderr, status.stdout, logs.stdout):
        assert SECRET not in text
    for path in Path(isolated_dirs["data"]).rglob("*"):
        if path.is_file():
            assert SECRET not in path.read_text(errors="replace"), path

    stopped = run_cli("stop", "--grace", "5", env=cli_env)
    assert stopped.returncode == 0 and "stopped and removed" in stopped.stdout
    # the launch's record is there, so the stop leaves word for the next launch to wait
    assert "the next launch waits for it" in stopped.stdout
    assert [p.name for p in (Path(isolated_dirs["data"]) / "returning").iterdir()] == [
        f"{container.id}.json"
    ]  # keyed by container id: a name is reused by the next launch
    assert scope_containers(docker_client, scope) == []
    assert run_cli("stop", env=cli_env).stdout.startswith("no sparkdeck engine is running")


def test_launch_over_a_running_engine_needs_yes(
    cli_env, isolated_dirs, scope, docker_client, llama_image
):
    presets = isolated_dirs["config"] / "presets"
    write_preset(presets, "a", **llama_preset_fields(llama_image, free_port()))
    write_preset(presets, "b", **llama_preset_fields(llama_image, free_port()))
    assert run_cli("launch", "a", "--no-flush", env=cli_env).returncode == 0
    refused = run_cli("launch", "b", "--no-flush", env=cli_env)
    assert refused.returncode == 1
    assert "pass --yes" in refused.stderr
    (only,) = scope_containers(docker_client, scope)
    assert only.labels["io.sparkdeck.preset"] == "a" and only.status == "running"

    switched = run_cli("launch", "b", "--no-flush", "--yes", env=cli_env)
    assert switched.returncode == 0, switched.stderr
    assert switched.stdout.index("stopped a") < switched.stdout.index("started ")
    (only,) = scope_containers(docker_client, scope)
    assert only.labels["io.sparkdeck.preset"] == "b"


def test_launch_errors_exit_1_with_a_clear_message(
    cli_env, isolated_dirs, scope, docker_client, llama_image
):
    unknown = run_cli("launch", "no-such-preset", "--no-flush", env=cli_env)
    assert unknown.returncode == 1 and "no preset with id 'no-such-preset'" in unknown.stderr
    write_preset(
        isolated_dirs["config"] / "presets",
        "gpu",
        **llama_preset_fields(llama_image, free_port(), gpus=True),
    )
    gpu = run_cli("launch", "gpu", "--no-flush", env=cli_env)
    assert gpu.returncode == 1 and "NVIDIA container runtime" in gpu.stderr
    assert "Traceback" not in gpu.stderr
    assert scope_containers(docker_client, scope) == []
    assert run_cli("launch", env=cli_env).returncode == 2  # usage error


def test_without_docker_status_says_what_is_missing(isolated_dirs, tmp_path):
    env = {**os.environ, "DOCKER_HOST": f"unix://{tmp_path}/no-docker.sock"}
    status = run_cli("status", env=env)
    assert status.returncode == 0
    assert "docker:  MISSING - cannot reach the Docker daemon" in status.stdout
    assert "gpu:" in status.stdout and "memory:" in status.stdout
    launch = run_cli("launch", "vllm-ngc", "--no-flush", env=env)
    assert launch.returncode == 1 and "cannot reach the Docker daemon" in launch.stderr
