"""vLLM: NVIDIA's NGC image (`vllm serve M`) and the upstream image (entrypoint is vllm serve)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from sparkdeck.engines.base import EndpointProbe, EngineKind, share_option
from sparkdeck.metrics.mapping import MetricsMap
from sparkdeck.guard.claims import MemoryClaim, share_claim
from sparkdeck.schema import Option

if TYPE_CHECKING:
    import httpx

    from sparkdeck.presets import Preset
    from sparkdeck.settings import GuardSettings


class VLLM(EngineKind):
    name = "vllm"
    title = "vLLM"
    default_port = 8000
    default_ipc = "host"
    # NVIDIA's playbook polls /health with a 900 s budget: first starts compile and download.
    default_startup_timeout = 900.0
    detect_order = 10
    owned_flags = {"--gpu-memory-utilization": "vllm.gpu_memory_utilization",
                   "--port": "port", "--host": "lan"}
    api_key_env = ("VLLM_API_KEY", *EngineKind.api_key_env)  # what `vllm serve` reads
    thinking_off_effort = "low"
    # vllm/v1/metrics/loggers.py; older releases spell some names differently (second).
    metrics_map = MetricsMap(
        generation_tokens=("vllm:generation_tokens_total",),
        prompt_tokens=("vllm:prompt_tokens_total",),
        running=("vllm:num_requests_running",),
        waiting=("vllm:num_requests_waiting",),
        kv_usage=("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc"),
        prefix_hits=("vllm:prefix_cache_hits_total", "vllm:gpu_prefix_cache_hits_total"),
        prefix_queries=("vllm:prefix_cache_queries_total",
                        "vllm:gpu_prefix_cache_queries_total"),
        ttft_histogram=("vllm:time_to_first_token_seconds",),
        itl_histogram=("vllm:inter_token_latency_seconds", "vllm:time_per_output_token_seconds"),
        spec_accepted=("vllm:spec_decode_num_accepted_tokens_total",),
        spec_drafted=("vllm:spec_decode_num_draft_tokens_total",),
    )
    metrics_hint = "vLLM always serves /metrics: check the URL and that nothing proxies it away"
    # Log lines of vLLM's V1 engine (vllm/v1/worker/gpu_model_runner.py, gpu_worker.py,
    # kv_cache_utils.py and the API server's uvicorn start-up). Checked against a real vLLM
    # 0.32 (its CPU build prints "CPU KV cache size" where a GPU prints "GPU KV cache size").
    startup_phases = (
        ("weights loading", r"Starting to load model|Loading weights"),
        ("KV-cache allocation", r"Available KV cache memory|[GC]PU KV cache size|# GPU blocks"),
        ("CUDA graph capture", r"Capturing CUDA graph"),
        ("ready", r"Application startup complete"),
    )
    options = {
        "gpu_memory_utilization": share_option(
            "share of the whole unified pool for weights, activations and KV cache"
        ),
        "serve_command": Option(
            "list[str]", ["vllm", "serve"],
            "argv before the model; [] for vllm/vllm-openai, whose entrypoint is vllm serve",
        ),
        "max_model_len": Option("int", None, "context length limit", minimum=16),
    }

    def command(self, preset: Preset) -> list[str]:
        opts = preset.options
        argv = [*opts["serve_command"], preset.model, "--host", "0.0.0.0",
                "--port", str(self.default_port),
                "--gpu-memory-utilization", f"{opts['gpu_memory_utilization']:g}"]
        if opts["max_model_len"] is not None:
            argv += ["--max-model-len", str(opts["max_model_len"])]
        return argv + list(preset.args)

    def memory_setting(self, preset: Preset) -> str:
        return f"--gpu-memory-utilization {preset.options['gpu_memory_utilization']:g}"

    def memory_claim(self, preset: Preset, total: int, guard: GuardSettings) -> MemoryClaim:
        # vLLM sizes weights + activations + KV cache to this share of the whole pool, and
        # refuses to start unless MemAvailable covers it (vllm #48140).
        return share_claim(preset.options["gpu_memory_utilization"], total,
                           "gpu_memory_utilization")

    def identify(self, probe: EndpointProbe) -> bool:
        return "vllm:" in probe.body("/metrics") or '"owned_by":"vllm"' in probe.body(
            "/v1/models"
        ).replace(" ", "")

    def exact_length_fields(self, tokens: int) -> dict[str, Any]:
        # vLLM's sampling extensions: ignore_eos keeps going past EOS, min_tokens forbids
        # stopping (stop strings included) before the count.
        return {"ignore_eos": True, "min_tokens": tokens}

    def count_chat_tokens(self, http: httpx.Client, base_url: str, model: str,
                          messages: list[dict[str, str]]) -> int | None:
        # vLLM's /tokenize applies the chat template when given messages and answers "count".
        response = http.post(base_url + "/tokenize", json={
            "model": model, "messages": messages, "add_generation_prompt": True})
        if response.status_code != 200:
            return None
        count = response.json().get("count")
        return int(count) if isinstance(count, int) else None
