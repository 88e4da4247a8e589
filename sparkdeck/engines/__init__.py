"""The engine kinds sparkdeck knows, looked up by name. Add a kind by adding a module here."""

from __future__ import annotations

from sparkdeck.engines.base import EndpointProbe, EngineKind
from sparkdeck.engines.llamacpp import LlamaCpp
from sparkdeck.engines.ollama import Ollama
from sparkdeck.engines.openai import OpenAICompatible
from sparkdeck.engines.sglang import SGLang
from sparkdeck.engines.trtllm import TensorRTLLM
from sparkdeck.engines.vllm import VLLM

KINDS: dict[str, EngineKind] = {
    kind.name: kind
    for kind in (VLLM(), SGLang(), LlamaCpp(), Ollama(), TensorRTLLM(), OpenAICompatible())
}


class UnknownEngineKind(KeyError):
    def __str__(self) -> str:
        return f"unknown engine kind {self.args[0]!r} (known: {', '.join(KINDS)})"


def get_kind(name: str) -> EngineKind:
    try:
        return KINDS[name]
    except KeyError:
        raise UnknownEngineKind(name) from None


def identify(probe: EndpointProbe) -> EngineKind | None:
    """The first kind, in detection order, that recognises the probed server."""
    for kind in sorted(KINDS.values(), key=lambda k: k.detect_order):
        if kind.identify(probe):
            return kind
    return None


__all__ = ["KINDS", "EndpointProbe", "EngineKind", "UnknownEngineKind", "get_kind", "identify"]


def startup_phases(kind_name: str) -> tuple[tuple[str, str], ...]:
    """The start-up phases an engine of that kind logs (none for a kind not known here)."""
    kind = KINDS.get(kind_name)
    return kind.startup_phases if kind else ()
