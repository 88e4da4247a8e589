"""What an engine will take from unified memory, with how that figure was reached.

Each engine kind computes its own claim (`EngineKind.memory_claim`); this module holds the
value they return and the GGUF arithmetic llama.cpp needs. A claim says which parts are
estimates, because a guard that overstates its certainty is worse than one that admits it.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

GIB = 2**30


@dataclass(frozen=True)
class MemoryClaim:
    """Bytes an engine is expected to claim (None: unknown), and the reasoning in words."""

    bytes: int | None
    basis: str  # e.g. "0.8 x MemTotal 121.7 GiB"
    estimated: bool = False  # True when part of the figure is a guess, not a setting
    note: str = ""  # what is not counted or why the figure is uncertain

    @property
    def known(self) -> bool:
        return self.bytes is not None

    def describe(self) -> str:
        if self.bytes is None:
            return f"unknown: {self.basis}"
        text = f"{self.bytes / GIB:.1f} GiB ({self.basis})"
        if self.estimated:
            text = "~" + text
        return f"{text}; {self.note}" if self.note else text

    def to_dict(self) -> dict[str, object]:
        return {
            "bytes": self.bytes,
            "basis": self.basis,
            "estimated": self.estimated,
            "note": self.note,
            "text": self.describe(),
        }


def share_claim(
    share: float, total: int, knob: str, extra: int = 0, extra_text: str = ""
) -> MemoryClaim:
    """A claim that is a share of the whole pool, optionally with a fixed amount on top."""
    basis = f"{knob} {share:g} x MemTotal {total / GIB:.1f} GiB"
    if extra:
        basis += f" + {extra / GIB:g} GiB {extra_text}"
    return MemoryClaim(int(share * total) + extra, basis)


def stated_claim(gib: float | None, key: str) -> MemoryClaim:
    """A claim the user wrote in the preset (the only source for engines sparkdeck cannot
    size, such as Ollama and custom images)."""
    if gib is None:
        return MemoryClaim(None, f"set {key} in the preset to let sparkdeck check the fit")
    return MemoryClaim(
        int(gib * GIB),
        f"{key} = {gib:g} as stated in the preset",
        estimated=True,
        note="sparkdeck cannot check a stated size",
    )


@dataclass(frozen=True)
class GgufShape:
    """What a GGUF header says about the size of a model and of its KV cache per token."""

    file_bytes: int
    layers: int
    kv_heads: int
    key_length: int
    value_length: int

    def kv_bytes(self, context: int, bytes_per_value: int = 2) -> int:
        """KV cache for `context` tokens at f16 (llama-server's default cache type)."""
        per_token = self.layers * self.kv_heads * (self.key_length + self.value_length)
        return context * per_token * bytes_per_value


class GgufUnreadable(ValueError):
    """The file is not a GGUF the `gguf` package can read, or lacks the attention figures."""


def read_gguf_shape(path: Path) -> GgufShape:
    """Read the layer and attention-head figures from a GGUF header with the `gguf` package."""
    from gguf import GGUFReader  # imported here: numpy is heavy and only llama.cpp needs it

    try:
        reader = GGUFReader(str(path), "r")
    except (OSError, ValueError) as exc:
        raise GgufUnreadable(f"{path}: not a readable GGUF ({exc})") from exc

    def field(key: str) -> int | None:
        found = reader.get_field(key)
        if found is None:
            return None
        value = found.contents()
        if isinstance(value, list):  # per-layer arrays (e.g. head_count_kv): the largest
            value = max(value) if value else None
        return int(value) if value is not None else None

    arch_field = reader.get_field("general.architecture")
    if arch_field is None:
        raise GgufUnreadable(f"{path}: no general.architecture in the GGUF header")
    arch = str(arch_field.contents())
    layers, heads = field(f"{arch}.block_count"), field(f"{arch}.attention.head_count")
    embedding = field(f"{arch}.embedding_length")
    if layers is None or heads is None or embedding is None:
        raise GgufUnreadable(
            f"{path}: the header lacks {arch}.block_count, head_count or embedding_length"
        )
    kv_heads = field(f"{arch}.attention.head_count_kv") or heads
    key_length = field(f"{arch}.attention.key_length") or embedding // heads
    value_length = field(f"{arch}.attention.value_length") or key_length
    return GgufShape(path.stat().st_size, layers, kv_heads, key_length, value_length)
