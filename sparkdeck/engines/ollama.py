"""Ollama: configured through environment variables; no Prometheus endpoint."""

from __future__ import annotations

import json
import math
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from sparkdeck.config.schema import Option
from sparkdeck.engines.base import EndpointProbe, EngineKind, stated_size_option
from sparkdeck.metrics.exposition import Families, MalformedMetrics, Series
from sparkdeck.metrics.mapping import MetricsMap
from sparkdeck.runtime.spec import Mount

if TYPE_CHECKING:
    import threading
    from collections.abc import Callable

    from sparkdeck.metrics.reader import MetricsTarget
    from sparkdeck.presets import Preset
    from sparkdeck.runtime.pull import PullProgress


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
    # /api/ps decoded into series of sparkdeck's own naming (see decode_ps).
    metrics_map = MetricsMap(
        memory_bytes=("ollama:size_bytes",),
        gpu_memory_bytes=("ollama:size_vram_bytes",),
        note="Ollama has no metrics endpoint (ollama#3144): memory and model come from "
        "/api/ps; tok/s shows per reply in the chat",
    )
    metrics_hint = "Ollama answers /api/ps on every version since 0.1.33: check the URL"
    options = {
        "context_length": Option(
            "int", 8192, "OLLAMA_CONTEXT_LENGTH", minimum=256, maximum=4_194_304
        ),
        "keep_alive": Option("str", "30m", "OLLAMA_KEEP_ALIVE: how long a model stays loaded"),
        "num_parallel": Option("int", 1, "OLLAMA_NUM_PARALLEL", minimum=1, maximum=64),
        "max_loaded_models": Option("int", 1, "OLLAMA_MAX_LOADED_MODELS", minimum=1, maximum=8),
        "memory_gib": stated_size_option("model weights + context, as `ollama ps` shows"),
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

    def thinking_fields(self, enabled: bool) -> dict[str, Any]:
        # Ollama's /v1 endpoint turns reasoning_effort into its native `think`: "none" is
        # think=false; any level turns thinking on (a level only matters to gpt-oss).
        return {"reasoning_effort": "medium" if enabled else "none"}

    def missing_model(self, base_url: str, preset: Preset) -> str | None:
        # The container starts with what its volume holds; a chat with any other model
        # fails with "model not found", so the launch pulls it (see ollama_models).
        if not preset.model:
            return None
        from sparkdeck.engines.ollama_models import model_present

        return None if model_present(base_url, preset.model) else preset.model

    def pull_model(
        self,
        base_url: str,
        model: str,
        on_progress: Callable[[PullProgress], object],
        cancel: threading.Event | None = None,
    ) -> None:
        from sparkdeck.engines.ollama_models import pull_model

        pull_model(base_url, model, on_progress, cancel)

    def identify(self, probe: EndpointProbe) -> bool:
        return '"version"' in probe.body("/api/version")

    def metrics_target(self, base_url: str, metrics_path: str | None) -> MetricsTarget | None:
        from sparkdeck.metrics.reader import MetricsTarget  # httpx: with the first scrape

        return MetricsTarget(
            base_url.rstrip("/") + "/api/ps", self.name, decode_ps, self.metrics_hint
        )


def decode_ps(body: bytes) -> Families:
    """/api/ps as series: ollama:size_bytes and ollama:size_vram_bytes per loaded model."""
    try:
        data = json.loads(body)
        models = data["models"] or []
    except (ValueError, TypeError, KeyError) as exc:
        raise MalformedMetrics(f"/api/ps is not Ollama's JSON ({type(exc).__name__})") from None
    size: list[tuple[tuple[tuple[str, str], ...], float]] = []
    vram: list[tuple[tuple[tuple[str, str], ...], float]] = []
    for item in models:
        if not isinstance(item, dict):
            raise MalformedMetrics("/api/ps lists a model that is not an object")
        labels = (("model", str(item.get("name") or item.get("model") or "?")),)
        for key, out in (("size", size), ("size_vram", vram)):
            value = item.get(key, 0)
            if (
                isinstance(value, bool)
                or not isinstance(value, (int, float))
                or not (math.isfinite(value) and value >= 0)
            ):
                raise MalformedMetrics(f"/api/ps {key} is {value!r}, not a byte count")
            out.append((labels, float(value)))
    return MappingProxyType(
        {"ollama:size_bytes": Series(tuple(size)), "ollama:size_vram_bytes": Series(tuple(vram))}
    )
