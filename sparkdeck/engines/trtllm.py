"""TensorRT-LLM's trtllm-serve: the KV share goes into an options YAML sparkdeck writes."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from sparkdeck.config.schema import Option
from sparkdeck.engines.base import (
    SHARE_CEILING,
    EndpointProbe,
    EngineKind,
    host_pool,
    share_option,
    stated_size_option,
    unsized_claim,
)
from sparkdeck.guard.claims import GIB, MemoryClaim
from sparkdeck.metrics.mapping import MetricsMap
from sparkdeck.runtime.spec import GeneratedFile

if TYPE_CHECKING:
    from sparkdeck.config.settings import GuardSettings
    from sparkdeck.presets import Preset

OPTIONS_PATH = "/etc/sparkdeck/trtllm-options.yaml"


class TensorRTLLM(EngineKind):
    name = "trtllm"
    title = "TensorRT-LLM"
    default_port = 8355
    default_ipc = "host"
    default_startup_timeout = 1200.0
    detect_order = 40
    owned_flags = {
        "--extra_llm_api_options": "trtllm.free_gpu_memory_fraction",
        "--config": "trtllm.free_gpu_memory_fraction",
        "--kv_cache_free_gpu_memory_fraction": "trtllm.free_gpu_memory_fraction",
        "--free_gpu_memory_fraction": "trtllm.free_gpu_memory_fraction",
        "--port": "port",
        "--host": "lan",
    }
    thinking_off_effort = "low"
    # Beyond weights and KV: the CUDA context, the runtime's activation buffers for the
    # default max_num_tokens 8,192 and CUDA graphs; TensorRT-LLM measures what is free after
    # these and gives the KV cache free_gpu_memory_fraction of it.
    plan_overhead = (4.0, "TensorRT-LLM: CUDA context, activation buffers, CUDA graphs")
    # tensorrt_llm/metrics/collector.py (names from its source, not seen on a live server).
    # trtllm-serve's /metrics is JSON iteration stats; Prometheus text is /prometheus/metrics.
    metrics_path = "/prometheus/metrics"
    metrics_map = MetricsMap(
        generation_tokens=("trtllm_generation_tokens_total",),
        prompt_tokens=("trtllm_prompt_tokens_total",),
        running=("trtllm_num_requests_running",),
        waiting=("trtllm_num_requests_waiting",),
        kv_usage=("trtllm_kv_cache_utilization",),
        prefix_hits=("trtllm_kv_cache_reused_blocks_total",),
        prefix_misses=("trtllm_kv_cache_missed_blocks_total",),
        prefix_hit_rate_gauge=("trtllm_kv_cache_hit_rate",),
        ttft_histogram=("trtllm_time_to_first_token_seconds",),
        itl_histogram=("trtllm_time_per_output_token_seconds",),
        spec_accepted=("trtllm_spec_decode_num_accepted_tokens_total",),
        spec_drafted=("trtllm_spec_decode_num_draft_tokens_total",),
    )
    metrics_hint = (
        "trtllm-serve has no Prometheus metrics at this path: use a release that "
        "serves /prometheus/metrics, or set the engine's metrics path"
    )
    options = {
        "free_gpu_memory_fraction": share_option(
            "share of the memory left after weights that the KV cache may take"
        ),
        # trtllm-serve 1.x reads --extra_llm_api_options; newer releases call it --config.
        "weights_gib": stated_size_option(
            "the model's weights; the KV share is of what is left after them"
        ),
        "options_flag": Option(
            "str",
            "--extra_llm_api_options",
            "the trtllm-serve flag that takes the options YAML",
            choices=("--extra_llm_api_options", "--config"),
        ),
    }

    def command(self, preset: Preset) -> list[str]:
        return [
            "trtllm-serve",
            preset.model,
            "--host",
            "0.0.0.0",
            "--port",
            str(self.default_port),
            preset.options["options_flag"],
            OPTIONS_PATH,
            *preset.args,
        ]

    def kv_fraction(self, preset: Preset) -> float:
        """The stated share, or for a preset sized from its model the plan's KV cache over
        what is free once the weights and the overhead are in (the pool, capped by
        MemAvailable, less both)."""
        from sparkdeck.models.sizing import share_of

        plan, _ = self.memory_plan(preset)
        total, available = host_pool() if plan is not None else (None, None)
        if plan is None or total is None:
            return float(preset.options["free_gpu_memory_fraction"])
        free = min(total, available if available is not None else total)
        free -= plan.weights + plan.overhead
        return share_of(plan.kv, max(free, 1), ceiling=SHARE_CEILING)

    def files(self, preset: Preset) -> list[GeneratedFile]:
        share = self.kv_fraction(preset)
        text = (
            f"# written by sparkdeck for preset {preset.id}; edit the preset, not this file\n"
            f"kv_cache_config:\n  free_gpu_memory_fraction: {share:g}\n"
        )
        return [GeneratedFile(OPTIONS_PATH, text)]

    def memory_setting(self, preset: Preset) -> str:
        return f"kv_cache_config.free_gpu_memory_fraction {self.kv_fraction(preset):g}"

    def memory_claim(self, preset: Preset, total: int, guard: GuardSettings) -> MemoryClaim:
        plan, why = self.memory_plan(preset)
        if plan is not None:
            return plan.claim()
        return unsized_claim(self._stated_claim(preset, total), why)

    def _stated_claim(self, preset: Preset, total: int) -> MemoryClaim:
        # TensorRT-LLM loads the weights, then gives the KV cache this share of the memory
        # still free: weights + share x (pool - weights). Without the weights the figure is
        # share x pool, a floor, and the claim says so.
        share = preset.options["free_gpu_memory_fraction"]
        weights_gib = preset.options["weights_gib"]
        if weights_gib is None:
            return MemoryClaim(
                int(share * total),
                f"free_gpu_memory_fraction {share:g} x MemTotal {total / GIB:.1f} GiB",
                estimated=True,
                note="a floor: set trtllm.weights_gib for the full figure",
            )
        weights = int(weights_gib * GIB)
        return MemoryClaim(
            weights + int(share * max(total - weights, 0)),
            f"weights {weights_gib:g} GiB (stated) + {share:g} x the "
            f"{max(total - weights, 0) / GIB:.1f} GiB left",
            estimated=True,
            note="activations not counted",
        )

    def identify(self, probe: EndpointProbe) -> bool:
        # Unverified against a live server: trtllm-serve reports its models as owned by
        # "tensorrt_llm" in /v1/models.
        return "tensorrt_llm" in probe.body("/v1/models")

    def exact_length_fields(self, tokens: int) -> dict[str, Any]:
        # trtllm-serve's OpenAI protocol carries ignore_eos and min_tokens into its sampling
        # config (read in its openai_protocol.py, not checked against a live server here).
        return {"ignore_eos": True, "min_tokens": tokens}
