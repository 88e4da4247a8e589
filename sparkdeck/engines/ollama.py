"""Ollama: configured through environment variables; no Prometheus endpoint."""

from __future__ import annotations

from typing import TYPE_CHECKING

from sparkdeck.container_spec import Mount
from sparkdeck.engines.base import EndpointProbe, EngineKind
from sparkdeck.schema import Option

if TYPE_CHECKING:
    from sparkdeck.presets import Preset


class Ollama(EngineKind):
    name = "ollama"
    title = "Ollama"
    default_port = 11434
    health_path = "/api/version"
    # Ollama's OpenAI endpoint has no ignore_eos/min_tokens: replies may end early, and the
    # benchmark records the token counts the server reports.
    version_paths = ("/api/version",)
    metrics_path = None  # ollama/ollama#3144: no /metrics; /api/ps reports what is loaded
    requires_model = False
    uses_hf_cache = False
    default_startup_timeout = 120.0
    detect_order = 5
    options = {
        "context_length": Option("int", 8192, "OLLAMA_CONTEXT_LENGTH", minimum=256,
                                 maximum=4_194_304),
        "keep_alive": Option("str", "30m", "OLLAMA_KEEP_ALIVE: how long a model stays loaded"),
        "num_parallel": Option("int", 1, "OLLAMA_NUM_PARALLEL", minimum=1, maximum=64),
        "max_loaded_models": Option("int", 1, "OLLAMA_MAX_LOADED_MODELS", minimum=1,
                                    maximum=8),
        "volume": Option("str", "ollama", "named Docker volume for /root/.ollama"),
    }

    def command(self, preset: Preset) -> list[str]:
        return ["serve", *preset.args]

    def environment(self, preset: Preset) -> dict[str, str]:
        opts = preset.options
        return {
            "OLLAMA_HOST": f"0.0.0.0:{self.default_port}",
            "OLLAMA_CONTEXT_LENGTH": str(opts["context_length"]),
            "OLLAMA_KEEP_ALIVE": opts["keep_alive"],
            "OLLAMA_NUM_PARALLEL": str(opts["num_parallel"]),
            "OLLAMA_MAX_LOADED_MODELS": str(opts["max_loaded_models"]),
        }

    def mounts(self, preset: Preset) -> list[Mount]:
        return [Mount(preset.options["volume"], "/root/.ollama", volume=True)]

    def memory_setting(self, preset: Preset) -> str:
        o = preset.options
        return f"context {o['context_length']}, {o['max_loaded_models']} model(s) loaded at most"

    def identify(self, probe: EndpointProbe) -> bool:
        return '"version"' in probe.body("/api/version")
