"""Reading ModelFacts from a model's files, without loading a single weight.

A Hugging Face directory gives its shape in config.json and its tensors' dtypes and shapes in
the safetensors headers (read with the `safetensors` package); a GGUF file gives both in its
header (read with the `gguf` package). Each problem raises ModelUnreadable naming the file.
"""

from __future__ import annotations

import json
import math
import re
from collections import Counter
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from sparkdeck.models.facts import ModelFacts

# Bytes per stored value, by safetensors dtype name (F8 and the 4-bit block formats are
# stored as U8 blocks by their quantisers, so they count through U8).
SAFETENSORS_BYTES = {
    "F64": 8,
    "I64": 8,
    "U64": 8,
    "F32": 4,
    "I32": 4,
    "U32": 4,
    "F16": 2,
    "BF16": 2,
    "I16": 2,
    "U16": 2,
    "F8_E4M3": 1,
    "F8_E5M2": 1,
    "F8_E8M0": 1,
    "I8": 1,
    "U8": 1,
    "BOOL": 1,
}

# A routed expert's tensor: "...experts.7.w1.weight" (Mixtral, Qwen-MoE, DeepSeek) or a fused
# tensor of every expert "...experts.gate_up_proj" (gpt-oss); never the shared experts.
_EXPERT = re.compile(r"(?<!shared_)experts\.(\d+\.|gate_up_proj|down_proj|gate_proj|up_proj)")


class ModelUnreadable(ValueError):
    """The files are not a model sparkdeck can read the shape of."""


def read_model(path: Path) -> ModelFacts:
    """Facts from a Hugging Face model directory or a .gguf file."""
    if path.is_dir():
        return read_hf_dir(path)
    if path.suffix == ".gguf":
        return read_gguf(path)
    raise ModelUnreadable(f"{path}: neither a model directory nor a .gguf file")


def _int(config: dict[str, Any], *keys: str, default: int | None = None) -> int | None:
    for key in keys:
        value = config.get(key)
        if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
            return value
    return default


def read_hf_dir(folder: Path) -> ModelFacts:
    config_path = folder / "config.json"
    try:
        config = json.loads(config_path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise ModelUnreadable(f"{config_path}: cannot read ({exc})") from exc
    if not isinstance(config, dict):
        raise ModelUnreadable(f"{config_path}: not a JSON object")
    text = config.get("text_config")  # multimodal models nest the language model's shape
    shape = text if isinstance(text, dict) else config
    layers = _int(shape, "num_hidden_layers", "n_layer", "num_layers")
    heads = _int(shape, "num_attention_heads", "n_head")
    hidden = _int(shape, "hidden_size", "n_embd", "d_model")
    if not layers or not heads or not hidden:
        raise ModelUnreadable(
            f"{config_path}: lacks num_hidden_layers, num_attention_heads or hidden_size"
        )
    kv_heads = _int(shape, "num_key_value_heads", "num_kv_heads", default=heads) or heads
    head_dim = _int(shape, "head_dim", default=hidden // heads) or hidden // heads
    latent = None
    if isinstance(shape.get("kv_lora_rank"), int):  # multi-head latent attention
        latent = int(shape["kv_lora_rank"]) + (_int(shape, "qk_rope_head_dim", default=0) or 0)
    window = _int(shape, "sliding_window")
    sliding = _sliding_layers(shape, layers) if window else 0
    files = sorted(folder.glob("*.safetensors"))
    if not files:
        raise ModelUnreadable(f"{folder}: no .safetensors files")
    weight, experts_bytes, params, dtypes = _safetensors_sizes(files)
    return ModelFacts(
        source=str(folder),
        format="safetensors",
        architecture=str((config.get("architectures") or [config.get("model_type", "?")])[0]),
        weight_bytes=weight,
        expert_bytes=experts_bytes,
        parameters=params,
        dtypes=dtypes,
        layers=layers,
        attention_heads=heads,
        kv_heads=kv_heads,
        head_dim=head_dim,
        experts=_int(shape, "num_local_experts", "num_experts", "n_routed_experts", default=0) or 0,
        experts_per_token=_int(
            shape, "num_experts_per_tok", "experts_per_token", "num_experts_per_token", default=0
        )
        or 0,
        sliding_window=window,
        sliding_layers=sliding,
        kv_latent_dim=latent,
        quantization=_quant_method(config),
    )


def _quant_method(config: dict[str, Any]) -> str | None:
    quant = config.get("quantization_config")
    method = quant.get("quant_method") if isinstance(quant, dict) else None
    return str(method) if method else None


def _sliding_layers(shape: dict[str, Any], layers: int) -> int:
    """How many layers attend within the window: `layer_types` when the config lists them
    (gpt-oss, Gemma 3), else every layer unless `use_sliding_window` says no (Mistral, Qwen2:
    the window applies to all layers when it is on)."""
    types = shape.get("layer_types")
    if isinstance(types, list):
        return sum(1 for t in types if t == "sliding_attention")
    if shape.get("use_sliding_window") is False:
        return 0
    return layers


def _safetensors_sizes(files: Iterable[Path]) -> tuple[int, int, int, tuple[str, ...]]:
    from safetensors import safe_open  # only the header is read

    total = experts = params = 0
    by_dtype: Counter[str] = Counter()
    for file in files:
        try:
            with safe_open(str(file), framework="numpy") as handle:
                for name in handle.keys():  # noqa: SIM118 (safetensors' handle is no dict)
                    piece = handle.get_slice(name)
                    dtype = piece.get_dtype()
                    count = math.prod(piece.get_shape())
                    size = count * SAFETENSORS_BYTES.get(dtype, 1)
                    total += size
                    params += count
                    by_dtype[dtype] += size
                    if _EXPERT.search(name):
                        experts += size
        except Exception as exc:  # the library raises its own untyped errors on bad headers
            raise ModelUnreadable(f"{file}: not a readable safetensors file ({exc})") from exc
    return total, experts, params, tuple(d for d, _ in by_dtype.most_common())


def read_gguf(path: Path) -> ModelFacts:
    from gguf import GGUFReader  # numpy is heavy: only when a GGUF is read

    try:
        reader = GGUFReader(str(path), "r")
    except (OSError, ValueError) as exc:
        raise ModelUnreadable(f"{path}: not a readable GGUF ({exc})") from exc

    def field(key: str) -> Any:
        found = reader.get_field(key)
        return None if found is None else found.contents()

    def number(key: str) -> int | None:
        value = field(key)
        if isinstance(value, list):  # per-layer arrays (head_count_kv on some models)
            value = max(value) if value else None
        return int(value) if value is not None else None

    arch = field("general.architecture")
    if not isinstance(arch, str):
        raise ModelUnreadable(f"{path}: no general.architecture in the GGUF header")
    layers, heads = number(f"{arch}.block_count"), number(f"{arch}.attention.head_count")
    embedding = number(f"{arch}.embedding_length")
    if not layers or not heads or not embedding:
        raise ModelUnreadable(
            f"{path}: the header lacks {arch}.block_count, head_count or embedding_length"
        )
    weight = experts = params = 0
    by_type: Counter[str] = Counter()
    for tensor in reader.tensors:
        weight += int(tensor.n_bytes)
        params += int(tensor.n_elements)
        by_type[tensor.tensor_type.name] += int(tensor.n_bytes)
        if "_exps" in tensor.name:  # blk.N.ffn_{gate,up,down}_exps: every expert, fused
            experts += int(tensor.n_bytes)
    window = number(f"{arch}.attention.sliding_window")
    file_type = number("general.file_type")
    return ModelFacts(
        source=str(path),
        format="gguf",
        architecture=arch,
        weight_bytes=weight,
        expert_bytes=experts,
        parameters=params,
        dtypes=tuple(t for t, _ in by_type.most_common()),
        layers=layers,
        attention_heads=heads,
        kv_heads=number(f"{arch}.attention.head_count_kv") or heads,
        head_dim=number(f"{arch}.attention.key_length") or embedding // heads,
        experts=number(f"{arch}.expert_count") or 0,
        experts_per_token=number(f"{arch}.expert_used_count") or 0,
        # The header gives the window but not which layers use it (Gemma 3 mixes them), so
        # every layer is counted as full attention: the KV figure errs on the large side.
        sliding_window=window,
        sliding_layers=0,
        quantization=_file_type(file_type),
    )


def _file_type(value: int | None) -> str | None:
    """GGUF's general.file_type as llama.cpp names it (MOSTLY_Q4_K_M -> Q4_K_M)."""
    from gguf import LlamaFileType

    if value is None:
        return None
    try:
        return LlamaFileType(value).name.removeprefix("MOSTLY_")
    except ValueError:
        return f"file type {value}"
