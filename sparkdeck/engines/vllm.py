"""vLLM: NVIDIA's NGC image (`vllm serve M`) and the upstream image (entrypoint is vllm serve)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from sparkdeck.config.schema import Option
from sparkdeck.engines.base import (
    SHARE_CEILING,
    EndpointProbe,
    EngineKind,
    host_pool,
    share_option,
    unsized_claim,
)
from sparkdeck.guard.claims import MemoryClaim, share_claim
from sparkdeck.metrics.mapping import MetricsMap

if TYPE_CHECKING:
    import httpx

    from sparkdeck.config.settings import GuardSettings
    from sparkdeck.presets import Preset


class VLLM(EngineKind):
    name = "vllm"
    title = "vLLM"
    default_port = 8000
    default_ipc = "host"
    # NVIDIA's playbook polls /health with a 900 s budget: first starts compile and download.
    default_startup_timeout = 900.0
    detect_order = 10
    owned_flags = {
        "--gpu-memory-utilization": "vllm.gpu_memory_utilization",
        "--kv-cache-memory-bytes": "context / kv_budget_gib",
        "--port": "port",
        "--host": "lan",
    }
    # Beyond weights and KV: the CUDA context and torch's own (~0.5 GiB), the activation peak
    # of the profiling pass at the default 8,192 batched tokens (1-2 GiB up to 70B models)
    # and the captured CUDA graphs (0.5-1 GiB), rounded up: vLLM's start-up log on a Spark
    # reports these as "non-torch", "activation peak" and "CUDA graph" memory.
    plan_overhead = (4.0, "vLLM: CUDA context, activation peak, CUDA graphs; ~4 GiB")
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
        prefix_queries=("vllm:prefix_cache_queries_total", "vllm:gpu_prefix_cache_queries_total"),
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
            "list[str]",
            ["vllm", "serve"],
            "argv before the model; [] for vllm/vllm-openai, whose entrypoint is vllm serve",
        ),
        "max_model_len": Option("int", None, "context length limit", minimum=16),
        # --kv-cache-memory-bytes came with vLLM 0.11; older images size the KV cache only
        # through --gpu-memory-utilization.
        "kv_cache_memory_bytes": Option(
            "bool",
            True,
            "for presets sized from the model: the image's vLLM takes "
            "--kv-cache-memory-bytes (0.11 and later)",
        ),
    }

    def memory_flags(self, preset: Preset) -> list[str]:
        """The memory flags: the stated share, or for a preset sized from its model the KV
        cache in bytes and a utilization that asks the start-up check for no more than the
        plan's total (capped by MemAvailable less a reserve)."""
        from sparkdeck.models.sizing import share_of

        opts = preset.options
        plan, _ = self.memory_plan(preset)
        total, available = host_pool() if plan is not None else (None, None)
        if plan is None or total is None:
            return ["--gpu-memory-utilization", f"{opts['gpu_memory_utilization']:g}"]
        share = share_of(plan.total, total, ceiling=SHARE_CEILING, available=available)
        flags = ["--gpu-memory-utilization", f"{share:g}"]
        if opts["kv_cache_memory_bytes"]:
            flags += ["--kv-cache-memory-bytes", str(plan.kv)]
        if preset.kv_cache_dtype:
            flags += ["--kv-cache-dtype", preset.kv_cache_dtype]
        return flags

    def command(self, preset: Preset) -> list[str]:
        opts = preset.options
        argv = [
            *opts["serve_command"],
            preset.model,
            "--host",
            "0.0.0.0",
            "--port",
            str(self.default_port),
            *self.memory_flags(preset),
        ]
        max_len = opts["max_model_len"] or preset.context
        if max_len is not None:
            argv += ["--max-model-len", str(max_len)]
        return argv + list(preset.args)

    def memory_setting(self, preset: Preset) -> str:
        return " ".join(self.memory_flags(preset))

    def memory_claim(self, preset: Preset, total: int, guard: GuardSettings) -> MemoryClaim:
        plan, why = self.memory_plan(preset)
        if plan is not None:
            return plan.claim()
        # vLLM sizes weights + activations + KV cache to this share of the whole pool, and
        # refuses to start unless MemAvailable covers it (vllm #48140).
        return unsized_claim(
            share_claim(preset.options["gpu_memory_utilization"], total, "gpu_memory_utilization"),
            why,
        )

    def identify(self, probe: EndpointProbe) -> bool:
        return "vllm:" in probe.body("/metrics") or '"owned_by":"vllm"' in probe.body(
            "/v1/models"
        ).replace(" ", "")

    def exact_length_fields(self, tokens: int) -> dict[str, Any]:
        # vLLM's sampling extensions: ignore_eos keeps going past EOS, min_tokens forbids
        # stopping (stop strings included) before the count.
        return {"ignore_eos": True, "min_tokens": tokens}

    def count_chat_tokens(
        self, http: httpx.Client, base_url: str, model: str, messages: list[dict[str, str]]
    ) -> int | None:
        # vLLM's /tokenize applies the chat template when given messages and answers "count".
        response = http.post(
            base_url + "/tokenize",
            json={"model": model, "messages": messages, "add_generation_prompt": True},
        )
        if response.status_code != 200:
            return None
        count = response.json().get("count")
        return int(count) if isinstance(count, int) else None
