"""What a model's files say about its memory: weights, KV cache per token, bytes per token.

Pure values and arithmetic; the readers in sparkdeck.models.read fill them from a Hugging
Face directory (config.json + safetensors headers) or a GGUF header, never loading weights.

Why each figure matters on a Spark:
- weight bytes are what loading the model takes from the shared 128 GB;
- KV bytes per token decide how much context x concurrency fits beside them, and differ by
  layout: grouped-query attention stores K and V for the KV heads only, multi-head latent
  attention (DeepSeek) one compressed latent per token and layer, and sliding-window layers
  hold at most `window` tokens whatever the context;
- active weight bytes (all of a dense model; for a mixture of experts the shared parts plus
  `experts_per_token / experts` of the expert weights) are what one decode step reads, so
  273 GB/s divided by them is the ceiling of one stream's tok/s.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

# Bytes per value of the KV cache dtypes engines offer (vLLM --kv-cache-dtype, llama.cpp
# --cache-type-k/-v). q8_0 and q4_0 carry a 2-byte scale per 32 values.
KV_DTYPE_BYTES: dict[str, float] = {
    "auto": 2.0,
    "f16": 2.0,
    "fp16": 2.0,
    "float16": 2.0,
    "bf16": 2.0,
    "bfloat16": 2.0,
    "f32": 4.0,
    "fp32": 4.0,
    "float32": 4.0,
    "fp8": 1.0,
    "fp8_e4m3": 1.0,
    "fp8_e5m2": 1.0,
    "q8_0": 34 / 32,
    "q4_0": 18 / 32,
}


class UnknownKvDtype(ValueError):
    """A KV cache dtype sparkdeck has no size for."""


def kv_dtype_bytes(name: str) -> float:
    try:
        return KV_DTYPE_BYTES[name.lower()]
    except KeyError:
        known = ", ".join(sorted(KV_DTYPE_BYTES))
        raise UnknownKvDtype(f"KV cache dtype {name!r} is not one of: {known}") from None


@dataclass(frozen=True)
class ModelFacts:
    """The memory-relevant shape of one model, as read from its files."""

    source: str  # the directory or file read
    format: str  # "safetensors" | "gguf"
    architecture: str
    weight_bytes: int  # every tensor, as stored
    expert_bytes: int  # the routed experts' share of weight_bytes (0 for a dense model)
    parameters: int
    dtypes: tuple[str, ...]  # storage dtypes seen, most bytes first
    layers: int
    attention_heads: int
    kv_heads: int
    head_dim: int  # K and V head size (they are equal in every layout read here)
    experts: int = 0  # routed experts per MoE layer (0: dense)
    experts_per_token: int = 0
    sliding_window: int | None = None
    sliding_layers: int = 0  # layers that attend only within sliding_window
    kv_latent_dim: int | None = None  # MLA: kv_lora_rank + rope head dim, per token and layer
    quantization: str | None = None  # the quantiser's name (awq, fp8, mxfp4) or GGUF file type

    @property
    def is_moe(self) -> bool:
        return self.experts > 0 and self.experts_per_token > 0

    @property
    def active_weight_bytes(self) -> int:
        """Bytes one decode step reads: shared weights plus the chosen experts' share."""
        if not self.is_moe or self.expert_bytes == 0:
            return self.weight_bytes
        share = min(self.experts_per_token / self.experts, 1.0)
        return round(self.weight_bytes - self.expert_bytes + self.expert_bytes * share)

    def kv_bytes_per_token_layer(self, kv_dtype: str = "auto") -> float:
        """KV bytes one token costs in one layer (full attention)."""
        size = kv_dtype_bytes(kv_dtype)
        if self.kv_latent_dim is not None:
            return self.kv_latent_dim * size  # one latent vector, K and V rebuilt from it
        return 2 * self.kv_heads * self.head_dim * size

    def kv_bytes(self, context: int, sequences: int = 1, kv_dtype: str = "auto") -> int:
        """KV cache for `sequences` sequences of `context` tokens each."""
        if context < 0 or sequences < 0:
            raise ValueError("context and sequences must be >= 0")
        per_layer = self.kv_bytes_per_token_layer(kv_dtype)
        sliding = min(self.sliding_layers, self.layers) if self.sliding_window else 0
        full = self.layers - sliding
        window_tokens = min(context, self.sliding_window or 0)
        per_sequence = per_layer * (full * context + sliding * window_tokens)
        return round(per_sequence * sequences)

    def kv_bytes_per_token(self, kv_dtype: str = "auto") -> float:
        """KV bytes per token of context when no layer is windowed (the long-context rate)."""
        full = self.layers - (min(self.sliding_layers, self.layers) if self.sliding_window else 0)
        return self.kv_bytes_per_token_layer(kv_dtype) * full

    def tokens_for(self, kv_budget_bytes: int, kv_dtype: str = "auto") -> int:
        """How many tokens of context (all sequences together) a KV budget holds, counting
        full-attention layers only (sliding layers stop growing at their window)."""
        rate = self.kv_bytes_per_token(kv_dtype)
        return int(kv_budget_bytes // rate) if rate > 0 else 0

    def to_dict(self) -> dict[str, Any]:
        return {
            **asdict(self),
            "active_weight_bytes": self.active_weight_bytes,
            "kv_bytes_per_token": self.kv_bytes_per_token(),
        }
