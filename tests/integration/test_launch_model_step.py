"""A launch whose Hub model is missing downloads it first, then starts the engine offline.

Real parts: the real huggingface_hub against a FAKE Hub on loopback (tests/support/fake_hub.py,
HF_ENDPOINT points at it), the real Docker daemon, and the real llama-server image
(tests/support/images.py) loading the downloaded GGUF from the mounted hub cache with its
network switched off. The disk-too-small case puts the cache on a real 1 MiB tmpfs.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import docker
import httpx
import pytest

from sparkdeck.launch.events import (
    ContainerStarted,
    EngineReady,
    FitChecked,
    ModelDownloaded,
    ModelDownloading,
    ModelDownloadStarted,
    ModelInCache,
)
from sparkdeck.launch.model_step import ModelStepFailed
from sparkdeck.launch.plan import LaunchFlow
from sparkdeck.models.hub_model import llama_cpp_files, repo_and_tag
from sparkdeck.presets import load_file
from tests.conftest import (
    base_fields,
    busybox_preset,
    free_port,
    llama_preset_fields,
    scope_containers,
    unavailable,
    write_preset,
)
from tests.support.fake_hub import FakeHub, FakeRepo
from tests.support.tiny_gguf import write_tiny_gguf

REPO = "fake-org/tiny-GGUF"
WANTED = "tiny-Q4_K_M.gguf"  # what llama-server's -hf picks when no tag is given
OTHER = "tiny-Q8_0.gguf"  # another quantisation: never fetched


# ----- pure: which repo, which files -------------------------------------------------------


def test_repo_ids_are_told_from_paths() -> None:
    assert repo_and_tag("Qwen/Qwen3-8B") == ("Qwen/Qwen3-8B", "")
    assert repo_and_tag("unsloth/Qwen3-8B-GGUF:Q8_0") == ("unsloth/Qwen3-8B-GGUF", "Q8_0")
    for not_a_repo in (
        "/models/x.gguf",
        "models/x.gguf",
        "./a/b",
        "~/a/b",
        "llama3",
        "a/b/c",
        "../b",
        "",
        "gpt-oss:20b",
    ):
        assert repo_and_tag(not_a_repo) is None, not_a_repo


def test_llama_cpp_picks_one_quantisation_with_its_splits() -> None:
    names = [
        "README.md",
        "m-Q2_K.gguf",
        "m-Q8_0.gguf",
        "m-Q4_K_M.gguf",
        "mmproj-m-F16.gguf",
        "m-Q4_K_M.imatrix.gguf",
    ]
    assert llama_cpp_files(names, "") == ["m-Q4_K_M.gguf"]  # Q4_K_M before Q8_0
    assert llama_cpp_files(names, "q8_0") == ["m-Q8_0.gguf"]  # tags match in any case
    assert llama_cpp_files(names, "IQ1_S") == []  # a tag that is not there: nothing
    assert llama_cpp_files(["mmproj-F16.gguf", "b-F16.gguf", "a-BF16.gguf"], "") == [
        "b-F16.gguf"
    ]  # neither default: the first model file, never the projector
    split = [
        "big/big-Q4_K_M-00002-of-00002.gguf",
        "big/big-Q4_K_M-00001-of-00002.gguf",
        "big/big-Q8_0-00001-of-00002.gguf",
    ]
    assert sorted(llama_cpp_files(split, "")) == sorted(split[:2])


# ----- real: the launch ----------------------------------------------------------------------


@pytest.fixture
def hub(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    wanted = write_tiny_gguf(tmp_path / "a.gguf").read_bytes()
    other = write_tiny_gguf(tmp_path / "b.gguf", seed=99).read_bytes()
    repo = FakeRepo({"README.md": b"# tiny\n", WANTED: wanted, OTHER: other}, lfs=(WANTED, OTHER))
    with FakeHub({REPO: repo}) as fake:
        monkeypatch.setenv("HF_ENDPOINT", fake.url)
        monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))  # the preset mounts this
        monkeypatch.delenv("HF_HUB_CACHE", raising=False)
        monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
        monkeypatch.setenv("HF_HUB_DISABLE_XET", "1")
        monkeypatch.delenv("HF_TOKEN", raising=False)
        yield fake


def _preset(tmp_path: Path, preset_id: str, image: str, model: str):
    return load_file(
        write_preset(
            tmp_path / "presets",
            preset_id,
            **llama_preset_fields(image, free_port(), model=model, hf_cache=True),
        )
    )


def _vllm_on_busybox(tmp_path: Path, preset_id: str, image: str, model: str):
    """A vLLM preset on the busybox image: for launches that must stop before the start."""
    return load_file(
        write_preset(
            tmp_path / "presets",
            preset_id,
            title=preset_id,
            kind="vllm",
            image=image,
            model=model,
            port=free_port(),
            **{**base_fields(), "hf_cache": True},
            vllm={"gpu_memory_utilization": 0.05, "serve_command": ["/bin/true"]},
        )
    )


def _env(docker_client: docker.DockerClient, container_id: str) -> dict[str, str]:
    env = docker_client.containers.get(container_id).attrs["Config"]["Env"]
    return dict(item.split("=", 1) for item in env)


@pytest.mark.docker
@pytest.mark.llama
def test_a_missing_model_is_downloaded_first_then_the_engine_starts_offline(
    hub: FakeHub, runtime, docker_client, tmp_path: Path, llama_image: str
) -> None:
    preset = _preset(tmp_path, "hub-gguf", llama_image, REPO)
    flow = LaunchFlow(lambda: runtime, flush=False, stop_grace=5)
    plan = flow.plan(preset)
    size = len(hub.repos[REPO].files[WANTED])
    assert any(
        line.startswith(f"will download 0.0 GiB of model {REPO} first") for line in plan.lines()
    ), plan.lines()
    assert plan.model is not None and plan.model.needed == size  # one file, not the repo

    events: list = []
    engine = flow.run(plan, events.append)

    kinds = [type(e) for e in events]
    order = [
        FitChecked,
        ModelDownloadStarted,
        ModelDownloading,
        ModelDownloaded,
        ContainerStarted,
        EngineReady,
    ]
    assert [k for k in kinds if k in order] == sorted(
        [k for k in kinds if k in order], key=order.index
    ), kinds
    assert set(order) <= set(kinds), kinds
    started = next(e for e in events if isinstance(e, ModelDownloadStarted))
    assert (started.needed, started.files) == (size, 1)
    assert (
        next(e for e in events if isinstance(e, ModelDownloading))
        .describe()
        .startswith(f"downloading {REPO}:")
    )
    # the fake Hub served the chosen file only, and the container got the offline switches
    assert hub.ranges(WANTED) and not hub.ranges(OTHER)
    env = _env(docker_client, engine.container_id)
    assert env["HF_HUB_OFFLINE"] == "1" and env["LLAMA_ARG_OFFLINE"] == "1"
    assert env["HF_HOME"] == "/root/.cache/huggingface"
    # the engine is ready: llama-server loaded that GGUF from the mounted cache, offline
    logs = docker_client.containers.get(engine.container_id).logs().decode(errors="replace")
    assert f"loading model '{REPO}'" in logs and "model loaded" in logs, logs[-2000:]
    props = httpx.get(engine.base_url + "/props", timeout=10).json()
    assert props["model_path"].startswith("/root/.cache/huggingface/hub/models--fake-org--")
    assert props["model_path"].endswith("/" + WANTED), props["model_path"]

    # a second launch finds it in the cache and fetches nothing
    served = len(hub.requests)
    events.clear()
    flow.run(flow.plan(preset), events.append)
    assert [type(e) for e in events].count(ModelInCache) == 1
    assert not any(isinstance(e, ModelDownloadStarted) for e in events)
    assert not [r for r in hub.requests[served:] if r[0] == "GET" and "/resolve/" in r[1]]


@pytest.mark.docker
def test_a_model_the_hub_does_not_have_fails_the_launch_before_anything_is_touched(
    hub: FakeHub, runtime, docker_client, scope, tmp_path: Path, busybox_image: str
) -> None:
    keeper = busybox_preset(
        tmp_path, "keeper", busybox_image, "trap 'exit 0' TERM; httpd -f -p 8080 -h /www & wait $!"
    )
    flow = LaunchFlow(lambda: runtime, flush=False, stop_grace=5)
    running = flow.run(flow.plan(keeper), lambda e: None)
    missing = _vllm_on_busybox(tmp_path, "no-such-model", busybox_image, "fake-org/not-there")
    plan = flow.plan(missing)
    assert any("the launch will be refused" in line for line in plan.lines()), plan.lines()
    refused = "not-there was not found or is private: export HF_TOKEN"
    with pytest.raises(ModelStepFailed, match=refused):
        flow.run(plan, lambda e: None, force=True)
    alive = [c for c in scope_containers(docker_client, scope)]
    assert [c.id for c in alive] == [running.container_id]
    assert docker_client.containers.get(running.container_id).status == "running"


@pytest.fixture
def tiny_disk(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """HF_HOME on a real 1 MiB tmpfs (needs root, as the CI runs)."""
    mount = tmp_path / "small"
    mount.mkdir()
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(mount)],
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        unavailable(f"cannot mount a tmpfs here: {done.stderr.strip()}")
    monkeypatch.setenv("HF_HOME", str(mount))
    yield mount
    subprocess.run(["umount", str(mount)], check=False)


@pytest.mark.docker
def test_too_little_disk_refuses_the_launch_with_the_numbers_and_starts_nothing(
    hub: FakeHub, tiny_disk: Path, runtime, docker_client, scope, tmp_path: Path, busybox_image: str
) -> None:
    big = b"\0" * (3 * 2**20)  # 3 MiB of weights for a 1 MiB disk
    hub.repos["fake-org/big"] = FakeRepo(
        {"config.json": b"{}", "model.safetensors": big}, lfs=("model.safetensors",)
    )
    preset = _vllm_on_busybox(tmp_path, "big-vllm", busybox_image, "fake-org/big")
    flow = LaunchFlow(lambda: runtime, flush=False, stop_grace=5)
    with pytest.raises(ModelStepFailed, match=r"needs 0\.00 GiB more but .* has 0\.00 GiB"):
        flow.run(flow.plan(preset), lambda e: None, force=True)
    assert scope_containers(docker_client, scope) == []
    assert not list(tiny_disk.rglob("*.incomplete"))  # nothing half-written left behind
