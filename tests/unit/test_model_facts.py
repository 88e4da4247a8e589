"""Model facts read from real files: public configs (tests/fixtures/model_configs, sources in
its README) beside safetensors files written here with the `safetensors` package, and GGUF
files written with the `gguf` package. The expected figures are worked out by hand in each
test from the published shapes."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
from safetensors.numpy import save_file

from sparkdeck.guard.claims import read_gguf_shape
from sparkdeck.models.facts import ModelFacts, UnknownKvDtype
from sparkdeck.models.read import ModelUnreadable, read_gguf, read_hf_dir, read_model
from tests.support.tiny_gguf import write_tiny_gguf

CONFIGS = Path(__file__).parents[1] / "fixtures" / "model_configs"
GIB = 1024**3


def model_dir(tmp_path: Path, config: str, tensors: dict[str, np.ndarray]) -> Path:
    folder = tmp_path / config.removesuffix(".json")
    folder.mkdir()
    shutil.copy(CONFIGS / config, folder / "config.json")
    save_file(tensors, str(folder / "model.safetensors"))
    return folder


def f16(*shape: int) -> np.ndarray:
    return np.zeros(shape, dtype=np.float16)


def test_llama_3_1_8b_kv_is_128_kib_per_token(tmp_path: Path) -> None:
    facts = read_hf_dir(model_dir(tmp_path, "llama-3.1-8b.json", {"lm_head.weight": f16(8, 8)}))
    # 2 (K and V) x 32 layers x 8 KV heads x 128 head size x 2 bytes (f16)
    assert facts.kv_bytes_per_token() == 2 * 32 * 8 * 128 * 2 == 128 * 1024
    assert facts.kv_bytes(8192) == GIB  # the well-known "1 GiB per 8k tokens" of Llama 3 8B
    assert facts.kv_bytes(8192, sequences=4, kv_dtype="fp8") == 2 * GIB
    assert facts.tokens_for(GIB) == 8192
    assert not facts.is_moe and facts.active_weight_bytes == facts.weight_bytes


def test_qwen2_5_7b_declared_window_that_is_off_counts_every_layer(tmp_path: Path) -> None:
    facts = read_hf_dir(model_dir(tmp_path, "qwen2.5-7b.json", {"x": f16(4)}))
    assert facts.head_dim == 3584 // 28 == 128  # no head_dim key: hidden / heads
    assert facts.sliding_layers == 0
    assert facts.kv_bytes_per_token() == 2 * 28 * 4 * 128 * 2 == 57344
    assert facts.kv_bytes(32768) == 32768 * 57344


def test_gpt_oss_20b_sliding_layers_stop_growing_at_their_window(tmp_path: Path) -> None:
    facts = read_hf_dir(model_dir(tmp_path, "gpt-oss-20b.json", {"x": f16(4)}))
    assert (facts.sliding_window, facts.sliding_layers) == (128, 12)
    per_layer = 2 * 8 * 64 * 2  # 2048 bytes per token and layer
    assert facts.kv_bytes(4096) == 12 * 4096 * per_layer + 12 * 128 * per_layer
    assert facts.kv_bytes(100) == 24 * 100 * per_layer  # inside the window every layer grows
    assert facts.kv_bytes_per_token() == 12 * per_layer  # the long-context rate


def test_deepseek_v3_latent_attention_stores_one_latent_per_layer(tmp_path: Path) -> None:
    facts = read_hf_dir(model_dir(tmp_path, "deepseek-v3.json", {"x": f16(4)}))
    assert facts.kv_latent_dim == 512 + 64
    assert facts.kv_bytes_per_token() == 61 * 576 * 2 == 70272
    # not the 2 x 128 heads x 128 x 61 x 2 = 7.6 MiB per token a plain MHA reading would give
    assert facts.kv_bytes_per_token() < 2 * 128 * 128 * 61 * 2 / 50
    assert (facts.experts, facts.experts_per_token) == (256, 8)


def test_mixtral_active_weights_are_shared_plus_two_of_eight_experts(tmp_path: Path) -> None:
    tensors = {"model.embed_tokens.weight": f16(64, 32), "lm_head.weight": f16(64, 32)}
    for layer in range(2):
        tensors[f"model.layers.{layer}.self_attn.q_proj.weight"] = f16(32, 32)
        tensors[f"model.layers.{layer}.block_sparse_moe.gate.weight"] = f16(8, 32)
        for expert in range(8):
            for w in ("w1", "w2", "w3"):
                tensors[f"model.layers.{layer}.block_sparse_moe.experts.{expert}.{w}.weight"] = f16(
                    48, 32
                )
    facts = read_hf_dir(model_dir(tmp_path, "mixtral-8x7b.json", tensors))
    shared = (2 * 64 * 32 + 2 * (32 * 32 + 8 * 32)) * 2
    experts = 2 * 8 * 3 * 48 * 32 * 2
    assert (facts.weight_bytes, facts.expert_bytes) == (shared + experts, experts)
    assert facts.active_weight_bytes == shared + experts * 2 // 8
    assert facts.parameters == (shared + experts) // 2 and facts.dtypes == ("F16",)


def test_fused_experts_count_and_shared_experts_do_not(tmp_path: Path) -> None:
    tensors = {
        "model.layers.0.mlp.experts.gate_up_proj": f16(32, 16, 8),  # gpt-oss: fused
        "model.layers.0.mlp.router.weight": f16(32, 16),
        "model.layers.0.self_attn.k_proj.weight": f16(16, 16),
    }
    facts = read_hf_dir(model_dir(tmp_path, "gpt-oss-20b.json", tensors))
    assert facts.expert_bytes == 32 * 16 * 8 * 2
    assert facts.active_weight_bytes == (32 * 16 + 16 * 16) * 2 + 4 * 16 * 8 * 2

    deepseek = {
        "model.layers.3.mlp.shared_experts.gate_proj.weight": f16(16, 8),
        "model.layers.3.mlp.experts.7.gate_proj.weight": f16(16, 8),
    }
    facts = read_hf_dir(model_dir(tmp_path, "deepseek-v3.json", deepseek))
    assert facts.expert_bytes == 16 * 8 * 2  # the shared expert is always read


def test_weight_bytes_agree_with_the_files_within_one_percent(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    tensors = {
        f"model.layers.{i}.mlp.down_proj.weight": rng.standard_normal((256, 512)).astype(np.float32)
        for i in range(4)
    }
    tensors["model.embed_tokens.weight"] = rng.standard_normal((1000, 256)).astype(np.float16)
    folder = model_dir(tmp_path, "llama-3.1-8b.json", tensors)
    facts = read_model(folder)
    on_disk = (folder / "model.safetensors").stat().st_size
    assert abs(facts.weight_bytes - on_disk) / on_disk < 0.01
    assert facts.dtypes == ("F32", "F16")  # most bytes first


def test_gguf_facts_agree_with_its_header_and_file_size(tmp_path: Path) -> None:
    path = write_tiny_gguf(
        tmp_path / "m.gguf", n_embd=512, n_layers=4, n_ff=1024, n_head=8, n_head_kv=2
    )
    facts = read_gguf(path)
    shape = read_gguf_shape(path)
    assert (facts.layers, facts.kv_heads, facts.head_dim) == (4, 2, 64)
    assert facts.kv_bytes(2048) == shape.kv_bytes(2048) == 2048 * 2 * 4 * 2 * 64 * 2
    size = path.stat().st_size
    assert abs(facts.weight_bytes - size) / size < 0.01
    assert facts.format == "gguf" and facts.architecture == "llama"
    assert read_model(path) == facts


def test_unreadable_files_name_the_file(tmp_path: Path) -> None:
    folder = tmp_path / "bad"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps({"hidden_size": 64}))
    with pytest.raises(ModelUnreadable, match=r"config\.json.*num_hidden_layers"):
        read_hf_dir(folder)
    (folder / "config.json").write_text(
        json.dumps({"num_hidden_layers": 2, "hidden_size": 64, "num_attention_heads": 2})
    )
    with pytest.raises(ModelUnreadable, match=r"no \.safetensors"):
        read_hf_dir(folder)
    (folder / "model.safetensors").write_bytes(b"\xff" * 64)
    with pytest.raises(ModelUnreadable, match=r"model\.safetensors"):
        read_hf_dir(folder)
    (tmp_path / "x.gguf").write_bytes(b"not a gguf at all")
    with pytest.raises(ModelUnreadable, match=r"x\.gguf"):
        read_model(tmp_path / "x.gguf")
    with pytest.raises(ModelUnreadable, match="neither"):
        read_model(tmp_path / "x.bin")


def test_kv_dtype_must_be_known() -> None:
    facts = ModelFacts("s", "gguf", "llama", 1, 0, 1, ("F16",), 2, 2, 1, 32)
    assert facts.kv_bytes(10, kv_dtype="q8_0") == round(10 * 2 * 2 * 32 * 34 / 32 * 1)
    with pytest.raises(UnknownKvDtype, match="fp7"):
        facts.kv_bytes(10, kv_dtype="fp7")
    with pytest.raises(ValueError):
        facts.kv_bytes(-1)


# ----- the library: the real huggingface_hub cache scanner over a real cache layout --------


def _safetensors_bytes(tensors: dict[str, np.ndarray], tmp: Path) -> bytes:
    save_file(tensors, str(tmp))
    return tmp.read_bytes()


def test_models_command_lists_cache_and_gguf_with_presets(
    tmp_path: Path, isolated_dirs: dict[str, Path]
) -> None:
    import os
    import subprocess
    import sys

    from tests.support.hf_cache import add_to_cache

    cache = tmp_path / "hub"
    weights = _safetensors_bytes(
        {"model.embed_tokens.weight": f16(512, 64)}, tmp_path / "w.safetensors"
    )
    add_to_cache(
        cache,
        "meta-llama/Llama-3.1-8B-Instruct",
        {"config.json": (CONFIGS / "llama-3.1-8b.json").read_bytes(), "model.safetensors": weights},
    )
    add_to_cache(cache, "broken/model", {"config.json": b"{not json"})
    ggufs = tmp_path / "ggufs"
    ggufs.mkdir()
    write_tiny_gguf(ggufs / "tiny.gguf")
    presets = isolated_dirs["config"] / "presets"
    presets.mkdir(parents=True)
    (presets / "my-vllm.toml").write_text(
        'title = "mine"\nkind = "vllm"\nimage = "vllm/vllm-openai:latest"\n'
        'model = "meta-llama/Llama-3.1-8B-Instruct"\n'
    )
    env = {**os.environ, "HF_HUB_CACHE": str(cache)}
    out = subprocess.run(
        [sys.executable, "-m", "sparkdeck", "models", "--json", "--dir", str(ggufs)],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    assert out.returncode == 0, out.stderr
    listed = {m["name"]: m for m in json.loads(out.stdout)["models"]}
    llama = listed["meta-llama/Llama-3.1-8B-Instruct"]
    assert llama["presets"] == ["my-vllm"]
    assert llama["facts"]["kv_bytes_per_token"] == 131072
    assert llama["facts"]["weight_bytes"] == 512 * 64 * 2
    assert llama["size_bytes"] >= len(weights) and llama["revision"]
    assert listed["broken/model"]["facts"] is None
    assert "config.json" in listed["broken/model"]["problem"]
    assert listed["tiny.gguf"]["facts"]["layers"] == 2

    text = subprocess.run(
        [sys.executable, "-m", "sparkdeck", "models", "--dir", str(ggufs)],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    assert text.returncode == 0, text.stderr
    line = next(x for x in text.stdout.splitlines() if x.startswith("meta-llama/"))
    assert "128 KiB" in line and "my-vllm" in line
    assert "tiny.gguf" in text.stdout
