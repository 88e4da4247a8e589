"""`sparkdeck models pull` / `rm` with the real huggingface_hub against a FAKE Hub on loopback
(tests/support/fake_hub.py; HF_ENDPOINT points at it) and a real cache directory."""

from __future__ import annotations

import hashlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from safetensors.numpy import save_file

from sparkdeck.models.hub_access import ChecksumMismatch, NeedsToken, NoSpace, RepoNotFound
from sparkdeck.models.pull import PullProgress, plan_pull, pull
from tests.support.fake_hub import FakeHub, FakeRepo

CONFIG = (
    Path(__file__).parents[1] / "fixtures" / "model_configs" / "llama-3.1-8b.json"
).read_bytes()
REPO = "fake-org/tiny-llama"


# huggingface_hub writes and reports in 10 MiB chunks: a 24 MiB file shows progress within
# the file, and a drop after 12 MiB leaves 10 MiB on disk to resume from.
MIB = 2**20


def weights(tmp_path: Path, rows: int = 49152) -> bytes:
    path = tmp_path / "w.safetensors"
    rng = np.random.default_rng(7)
    save_file(
        {"model.embed_tokens.weight": rng.standard_normal((rows, 256)).astype(np.float16)},
        str(path),
    )
    return path.read_bytes()


@pytest.fixture
def hub(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    repo = FakeRepo(
        {"config.json": CONFIG, "model.safetensors": weights(tmp_path)}, lfs=("model.safetensors",)
    )
    with FakeHub({REPO: repo}) as fake:
        monkeypatch.setenv("HF_ENDPOINT", fake.url)
        monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
        monkeypatch.setenv("HF_HUB_DISABLE_XET", "1")
        monkeypatch.delenv("HF_TOKEN", raising=False)
        yield fake


def test_pull_reports_progress_and_the_model_is_then_readable(hub: FakeHub) -> None:
    seen: list[PullProgress] = []
    plan = plan_pull(REPO)
    assert plan.total == len(CONFIG) + len(hub.repos[REPO].files["model.safetensors"])
    assert plan.needed == plan.total
    snapshot = pull(plan, seen.append)
    assert (snapshot / "model.safetensors").read_bytes() == hub.repos[REPO].files[
        "model.safetensors"
    ]
    assert seen[-1].done == plan.total and seen[-1].total == plan.total
    assert [p.done for p in seen] == sorted(p.done for p in seen)
    assert any(p.file == "model.safetensors" and 0 < p.file_done < p.file_total for p in seen)
    assert seen[-1].rate > 0
    from sparkdeck.models.read import read_hf_dir

    assert read_hf_dir(snapshot).kv_bytes_per_token() == 131072
    # a second pull finds everything in the cache
    assert plan_pull(REPO).needed == 0


def test_a_dropped_connection_is_resumed_with_a_range_request(hub: FakeHub) -> None:
    hub.drop_after["model.safetensors"] = (12 * MIB, 1)
    snapshot = pull(plan_pull(REPO), lambda p: None)
    data = hub.repos[REPO].files["model.safetensors"]
    assert (snapshot / "model.safetensors").read_bytes() == data
    ranges = hub.ranges("model.safetensors")
    assert ranges[0] is None and ranges[-1] == f"bytes={10 * MIB}-", ranges


def test_gated_and_private_repos_name_hf_token_and_never_print_it(
    hub: FakeHub, monkeypatch: pytest.MonkeyPatch
) -> None:
    hub.repos["fake-org/gated"] = FakeRepo({"config.json": CONFIG}, gated=True)
    hub.repos["fake-org/private"] = FakeRepo({"config.json": CONFIG}, private=True)
    with pytest.raises(NeedsToken, match="export HF_TOKEN"):
        pull(plan_pull("fake-org/gated"), lambda p: None)
    with pytest.raises(NeedsToken, match="HF_TOKEN"):
        plan_pull("fake-org/private")
    monkeypatch.setenv("HF_TOKEN", "hf_wrong_secret_value")
    with pytest.raises(NeedsToken, match="HF_TOKEN was refused") as refused:
        pull(plan_pull("fake-org/gated"), lambda p: None)
    assert "hf_wrong_secret_value" not in str(refused.value)
    monkeypatch.setenv("HF_TOKEN", hub.token)
    snapshot = pull(plan_pull("fake-org/private"), lambda p: None)
    assert (snapshot / "config.json").read_bytes() == CONFIG


def test_missing_repo_revision_and_file(hub: FakeHub, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_TOKEN", hub.token)
    with pytest.raises(RepoNotFound, match="no such model repo"):
        plan_pull("fake-org/nothing")
    with pytest.raises(RepoNotFound, match="no such revision"):
        plan_pull(REPO, revision="v9")
    with pytest.raises(RepoNotFound, match="no file matches"):
        plan_pull(REPO, include=["*.gguf"])
    assert [f.name for f in plan_pull(REPO, include=["*.json"]).files] == ["config.json"]


def test_too_little_disk_is_refused_with_the_numbers(hub: FakeHub, tmp_path: Path) -> None:
    # The free-space reader is FAKED at its seam (a tiny filesystem in effect).
    with pytest.raises(NoSpace, match=r"needs 0\.02 GiB more but .* has 0\.00 GiB free"):
        plan_pull(REPO, free_space=lambda path: 1000)
    assert not hub.ranges("model.safetensors")  # nothing was fetched
    assert not (tmp_path / "hub" / "models--fake-org--tiny-llama" / "blobs").exists()


def test_a_checksum_mismatch_is_refused_and_not_kept(hub: FakeHub, tmp_path: Path) -> None:
    hub.corrupt.add("model.safetensors")
    with pytest.raises(ChecksumMismatch, match="sha256"):
        pull(plan_pull(REPO), lambda p: None)
    sha = hashlib.sha256(hub.repos[REPO].files["model.safetensors"]).hexdigest()
    blobs = tmp_path / "hub" / "models--fake-org--tiny-llama" / "blobs"
    assert not (blobs / sha).exists()


def _cli(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "sparkdeck", "models", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )


def test_ctrl_c_keeps_completed_files_and_the_next_pull_resumes_after_them(
    hub: FakeHub, tmp_path: Path
) -> None:
    # huggingface_hub 2.x deletes a partly fetched file when its download stops, so a pull
    # resumes per file across runs (byte ranges only within a run, tested above).
    repo = hub.repos[REPO]
    repo.files["model-2.safetensors"] = repo.files.pop("model.safetensors")
    repo.files["model-1.safetensors"] = weights(tmp_path, rows=1024)
    repo.files = dict(sorted(repo.files.items()))
    repo.lfs = ("model-1.safetensors", "model-2.safetensors")
    hub.slow["model-2.safetensors"] = 0.02  # 64 KiB every 20 ms: about 8 s for the file
    env = dict(os.environ)
    blobs = tmp_path / "hub" / "models--fake-org--tiny-llama" / "blobs"
    first = hashlib.sha256(repo.files["model-1.safetensors"]).hexdigest()
    process = subprocess.Popen(
        [sys.executable, "-m", "sparkdeck", "models", "pull", REPO],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and not (
        blobs.is_dir() and any(p.stat().st_size >= 10 * MIB for p in blobs.glob("*.incomplete"))
    ):
        time.sleep(0.05)
    process.send_signal(signal.SIGINT)
    out, err = process.communicate(timeout=30)
    assert process.returncode == 130, (out, err)
    assert "2 of 3 file(s) complete stay in the cache" in err and "resumes" in err
    assert (blobs / first).is_file() and not list(blobs.glob("*.incomplete"))

    hub.slow.clear()
    fetched_before = len(hub.ranges("model-1.safetensors"))
    done = _cli("pull", REPO, env=env)
    assert done.returncode == 0, done.stderr
    assert len(hub.ranges("model-1.safetensors")) == fetched_before  # not fetched again
    assert "to fetch" in done.stdout and "done:" in done.stdout

    gone = _cli("rm", REPO, env=env)  # no terminal to ask on, no --yes: nothing deleted
    assert gone.returncode == 1 and "--yes" in gone.stderr
    assert blobs.is_dir()
    gone = _cli("rm", REPO, "--yes", env=env)
    assert gone.returncode == 0 and "deleted" in gone.stdout, gone.stderr
    assert not blobs.parent.exists()
    again = _cli("rm", REPO, "--yes", env=env)
    assert again.returncode == 1 and "not in the Hugging Face cache" in again.stderr
