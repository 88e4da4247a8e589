"""Right-sized memory: presets that state context x concurrency (or a KV budget) are sized
from their model's real files (a Hugging Face cache laid out as huggingface_hub lays it out,
safetensors written with `safetensors`, GGUF written with `gguf`), and each engine's own knob
follows. Figures are worked out by hand from the public Llama 3.1 8B shape (128 KiB of f16
KV per token)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from safetensors.numpy import save_file

from sparkdeck.config.settings import GuardSettings
from sparkdeck.engines import get_kind
from sparkdeck.engines import sglang as sglang_engine
from sparkdeck.engines import trtllm as trtllm_engine
from sparkdeck.engines import vllm as vllm_engine
from sparkdeck.models.plan import preset_plan
from sparkdeck.models.sizing import PlanUnavailable, share_of
from sparkdeck.presets import Preset, PresetError, load_file
from tests.conftest import write_preset
from tests.support.hf_cache import add_to_cache
from tests.support.tiny_gguf import write_tiny_gguf

CONFIGS = Path(__file__).parents[1] / "fixtures" / "model_configs"
GIB = 2**30
REPO = "meta-llama/Llama-3.1-8B-Instruct"
# A FAKE pool for the knobs' arithmetic (MemTotal, MemAvailable of a Spark), put in at the
# one seam that reads /proc/meminfo, so the shares below are worked out by hand.
POOL = (128 * GIB, 100 * GIB)


@pytest.fixture
def hub(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A hub cache holding Llama 3.1 8B's config with 16 MiB of f16 weights."""
    cache = tmp_path / "hub"
    weights = tmp_path / "w.safetensors"
    save_file({"model.embed_tokens.weight": np.zeros((2048, 4096), dtype=np.float16)}, str(weights))
    add_to_cache(
        cache,
        REPO,
        {
            "config.json": (CONFIGS / "llama-3.1-8b.json").read_bytes(),
            "model.safetensors": weights.read_bytes(),
        },
    )
    monkeypatch.setenv("HF_HUB_CACHE", str(cache))
    for module in (vllm_engine, sglang_engine, trtllm_engine):
        monkeypatch.setattr(module, "host_pool", lambda: POOL)
    return cache


def preset(tmp_path: Path, kind: str, **fields: Any):
    base = {"title": "t", "kind": kind, "image": "img:1", "model": REPO}
    return load_file(write_preset(tmp_path / "presets", f"p-{kind}", **{**base, **fields}))


WEIGHTS = 2048 * 4096 * 2


def test_vllm_sized_from_model_sets_kv_bytes_and_a_matching_utilization(
    tmp_path: Path, hub: Path
) -> None:
    p = preset(tmp_path, "vllm", context=8192, concurrency=4)
    plan = preset_plan(p)
    assert (plan.weights, plan.kv, plan.overhead) == (WEIGHTS, 4 * GIB, 4 * GIB)
    assert plan.kv_tokens == 32768 and plan.sequences == 4
    claim = p.memory_claim(POOL[0], GuardSettings())
    assert claim.bytes == WEIGHTS + 8 * GIB and not claim.estimated
    assert "weights 0.02 GiB + KV 4.00 GiB + overhead 4.00 GiB" in claim.basis
    assert "exact" in claim.note
    argv = p.container_spec().command
    share = float(argv[argv.index("--gpu-memory-utilization") + 1])
    # (16 MiB + 8 GiB) / 128 GiB = 0.0626..., rounded up to 3 places
    assert share == 0.063
    assert argv[argv.index("--kv-cache-memory-bytes") + 1] == str(4 * GIB)
    assert argv[argv.index("--max-model-len") + 1] == "8192"


def test_vllm_without_the_kv_bytes_flag_sizes_through_utilization(
    tmp_path: Path, hub: Path
) -> None:
    p = preset(
        tmp_path, "vllm", context=8192, kv_cache_dtype="fp8", vllm={"kv_cache_memory_bytes": False}
    )
    assert preset_plan(p).kv == GIB // 2  # fp8: half of f16's 1 GiB per 8k tokens
    argv = p.container_spec().command
    assert "--kv-cache-memory-bytes" not in argv
    assert argv[argv.index("--kv-cache-dtype") + 1] == "fp8"
    assert float(argv[argv.index("--gpu-memory-utilization") + 1]) == 0.036


def test_utilization_is_capped_by_mem_available_less_the_reserve() -> None:
    assert share_of(90 * GIB, 100 * GIB, ceiling=0.9, available=50 * GIB) == 0.48
    assert share_of(10 * GIB, 100 * GIB, ceiling=0.9, available=50 * GIB) == 0.1
    assert share_of(99 * GIB, 100 * GIB, ceiling=0.9) == 0.9


def test_a_model_that_is_not_here_keeps_the_stated_share_and_says_so(
    tmp_path: Path, hub: Path
) -> None:
    p = preset(tmp_path, "vllm", model="nobody/absent", context=4096)
    claim = p.memory_claim(POOL[0], GuardSettings())
    assert claim.bytes == int(0.8 * POOL[0])
    assert "not sized from the model" in claim.note and "not on this machine" in claim.note
    argv = p.container_spec().command
    assert argv[argv.index("--gpu-memory-utilization") + 1] == "0.8"
    with pytest.raises(PlanUnavailable, match="not on this machine"):
        preset_plan(p)


def test_a_preset_without_context_is_unchanged(tmp_path: Path, hub: Path) -> None:
    p = preset(tmp_path, "vllm")
    assert p.memory_claim(POOL[0], GuardSettings()).bytes == int(0.8 * POOL[0])
    assert "--kv-cache-memory-bytes" not in p.container_spec().command


def test_sglang_static_fraction_is_weights_plus_kv(tmp_path: Path, hub: Path) -> None:
    p = preset(tmp_path, "sglang", context=8192, kv_budget_gib=8.0)
    plan = preset_plan(p)
    assert plan.kv == 8 * GIB and plan.sequences == 8 and plan.kv_tokens == 65536
    argv = p.container_spec().command
    # (16 MiB + 8 GiB) / 128 GiB = 0.0626 -> 0.063
    assert argv[argv.index("--mem-fraction-static") + 1] == "0.063"
    assert argv[argv.index("--context-length") + 1] == "8192"
    assert p.memory_claim(POOL[0], GuardSettings()).bytes == WEIGHTS + 14 * GIB


def test_trtllm_fraction_is_of_what_is_free_after_weights(tmp_path: Path, hub: Path) -> None:
    p = preset(tmp_path, "trtllm", context=8192, concurrency=10)
    text = p.container_spec().files[0].content
    # KV 10 GiB over what is free: MemAvailable 100 GiB less 16 MiB of weights and 4 GiB
    # of overhead = 95.984375 GiB; 10 / 95.984375 = 0.10418..., rounded up to 3 places
    assert "free_gpu_memory_fraction: 0.105\n" in text


def test_llamacpp_context_is_tokens_of_every_slot(tmp_path: Path) -> None:
    gguf = write_tiny_gguf(tmp_path / "tiny.gguf", n_embd=256, n_layers=4, n_head=8, n_head_kv=2)
    p = preset(tmp_path, "llamacpp", model=str(gguf), context=2048, concurrency=3)
    plan = preset_plan(p)
    # 2 x 4 layers x 2 KV heads x 32 head size x 2 bytes = 1 KiB per token
    assert plan.kv_bytes_per_token == 1024 and plan.kv == 3 * 2048 * 1024
    argv = p.container_spec().command
    assert argv[argv.index("-c") + 1] == "6144" and argv[argv.index("--parallel") + 1] == "3"
    assert plan.weights == sum(t.n_bytes for t in __import__("gguf").GGUFReader(str(gguf)).tensors)


@pytest.mark.parametrize(
    ("fields", "key", "words"),
    [
        ({"concurrency": 2}, "concurrency", "needs `context`"),
        ({"context": 4096, "concurrency": 2, "kv_budget_gib": 4.0}, "concurrency", "not both"),
        ({"context": 4096, "kv_cache_dtype": "int3"}, "kv_cache_dtype", "not one of"),
        ({"context": 8}, "context", "out of range"),
    ],
)
def test_sizing_keys_are_checked(
    tmp_path: Path, fields: dict[str, Any], key: str, words: str
) -> None:
    with pytest.raises(PresetError) as caught:
        preset(tmp_path, "vllm", **fields)
    assert any(p.key == key and words in p.message for p in caught.value.problems)


def test_metrics_ceiling_uses_active_weights_when_the_preset_states_none(
    tmp_path: Path, hub: Path
) -> None:
    def ceiling(p: Preset) -> float | None:
        return get_kind("vllm").metrics_plan("http://127.0.0.1:1", "/metrics", p).bytes_per_token

    assert ceiling(preset(tmp_path, "vllm")) == WEIGHTS
    assert ceiling(preset(tmp_path, "vllm", bytes_per_token=4.6e9)) == 4.6e9
    assert ceiling(preset(tmp_path, "vllm", model="nobody/absent")) is None


def test_models_plan_command_prints_the_parts(
    tmp_path: Path, hub: Path, isolated_dirs: dict[str, Path]
) -> None:
    write_preset(
        isolated_dirs["config"] / "presets",
        "sized",
        title="t",
        kind="llamacpp",
        image="img:1",
        model=str(write_tiny_gguf(tmp_path / "m.gguf")),
        context=1024,
        concurrency=2,
    )
    env = {**os.environ, "HF_HUB_CACHE": str(hub)}
    out = subprocess.run(
        [sys.executable, "-m", "sparkdeck", "models", "plan", "sized", "--json"],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)
    assert data["sized_from_model"] and data["plan"]["sequences"] == 2
    assert data["plan"]["kv"] == 2048 * data["plan"]["kv_bytes_per_token"]
    assert data["memory_setting"].startswith("-c 2048 ")
    text = subprocess.run(
        [sys.executable, "-m", "sparkdeck", "models", "plan", "sized"],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    assert "weights:" in text.stdout and "overhead:" in text.stdout
    assert "total claim:" in text.stdout
    missing = subprocess.run(
        [sys.executable, "-m", "sparkdeck", "models", "plan", "nope"],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    assert missing.returncode == 2 and "no preset" in missing.stderr
