"""SGLang: `python3 -m sglang.launch_server`, metrics only with --enable-metrics."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from sparkdeck.engines.base import (
    SHARE_CEILING,
    EndpointProbe,
    EngineKind,
    host_pool,
    share_option,
    unsized_claim,
)
from sparkdeck.guard.claims import GIB, MemoryClaim, share_claim
from sparkdeck.metrics.mapping import MetricsMap

if TYPE_CHECKING:
    from sparkdeck.config.settings import GuardSettings
    from sparkdeck.presets import Preset


class SGLang(EngineKind):
    name = "sglang"
    version_paths = ("/version", "/get_server_info")
    title = "SGLang"
    default_port = 30000
    default_ipc = "host"
    default_startup_timeout = 900.0
    detect_order = 20
    owned_flags = {
        "--mem-fraction-static": "sglang.mem_fraction_static",
        "--port": "port",
        "--host": "lan",
    }
    thinking_off_effort = "low"
    # --mem-fraction-static covers weights + KV pool only; activations and CUDA graphs come
    # on top: 5-8 GB on a Spark (the same figure as guard.sglang_reserve_gib's default).
    plan_overhead = (
        6.0,
        "SGLang: activations and CUDA graphs outside the static pool, 5-8 GB on a Spark",
    )
    # python/sglang/srt/metrics/collector.py. Its token counters move only when a request
    # ends, so the live tok/s is its own gen_throughput gauge.
    metrics_map = MetricsMap(
        generation_tokens=("sglang:generation_tokens_total",),
        prompt_tokens=("sglang:prompt_tokens_total",),
        generation_rate_gauge=("sglang:gen_throughput",),
        running=("sglang:num_running_reqs",),
        waiting=("sglang:num_queue_reqs",),
        kv_usage=("sglang:token_usage",),
        prefix_hit_rate_gauge=("sglang:cache_hit_rate",),
        ttft_histogram=("sglang:time_to_first_token_seconds",),
        itl_histogram=(
            "sglang:inter_token_latency_seconds",
            "sglang:time_per_output_token_seconds",
        ),
        spec_accept_rate_gauge=("sglang:spec_accept_rate",),
        counters_move_at_request_end=True,
    )
    metrics_hint = (
        "SGLang serves metrics only with --enable-metrics: add it to the launch "
        "command (sparkdeck's SGLang presets add it)"
    )
    # Log lines of sglang/srt/model_executor/model_runner.py and the HTTP server.
    startup_phases = (
        ("weights loading", r"Load weight begin"),
        ("KV-cache allocation", r"Memory pool end|KV Cache is allocated"),
        ("CUDA graph capture", r"Capture cuda graph begin"),
        ("ready", r"The server is fired up and ready to roll|Application startup complete"),
    )
    options = {
        "mem_fraction_static": share_option(
            "(weights + KV pool) / whole pool; activations and CUDA graphs come on top"
        ),
    }

    def memory_flags(self, preset: Preset) -> list[str]:
        """The stated static fraction, or for a preset sized from its model (weights + KV)
        over the pool, capped by MemAvailable less a reserve."""
        from sparkdeck.models.sizing import share_of

        plan, _ = self.memory_plan(preset)
        total, available = host_pool() if plan is not None else (None, None)
        if plan is None or total is None:
            return ["--mem-fraction-static", f"{preset.options['mem_fraction_static']:g}"]
        share = share_of(
            plan.weights + plan.kv,
            total,
            ceiling=SHARE_CEILING,
            available=None if available is None else available - plan.overhead,
        )
        flags = ["--mem-fraction-static", f"{share:g}"]
        if preset.context is not None:
            flags += ["--context-length", str(preset.context)]
        if preset.kv_cache_dtype:
            flags += ["--kv-cache-dtype", preset.kv_cache_dtype]
        return flags

    def command(self, preset: Preset) -> list[str]:
        return [
            "python3",
            "-m",
            "sglang.launch_server",
            "--model-path",
            preset.model,
            "--host",
            "0.0.0.0",
            "--port",
            str(self.default_port),
            *self.memory_flags(preset),
            "--enable-metrics",
            *preset.args,
        ]

    def memory_setting(self, preset: Preset) -> str:
        return " ".join(self.memory_flags(preset))

    def memory_claim(self, preset: Preset, total: int, guard: GuardSettings) -> MemoryClaim:
        plan, why = self.memory_plan(preset)
        if plan is not None:
            return plan.claim()
        return unsized_claim(self._stated_claim(preset, total, guard), why)

    def _stated_claim(self, preset: Preset, total: int, guard: GuardSettings) -> MemoryClaim:
        # The static fraction covers weights + KV pool only; activations and CUDA graphs
        # come on top (5-8 GB on a Spark), so a reserve from settings.toml is added.
        reserve = int(guard.sglang_reserve_gib * GIB)
        claim = share_claim(
            preset.options["mem_fraction_static"],
            total,
            "mem_fraction_static",
            reserve,
            "activation reserve",
        )
        return MemoryClaim(
            claim.bytes,
            claim.basis,
            estimated=True,
            note="the activation reserve is an estimate (guard.sglang_reserve_gib)",
        )

    def identify(self, probe: EndpointProbe) -> bool:
        return "sglang:" in probe.body("/metrics") or probe.status("/get_server_info") == 200

    def exact_length_fields(self, tokens: int) -> dict[str, Any]:
        # SGLang's ChatCompletionRequest takes both as sampling parameters.
        return {"ignore_eos": True, "min_tokens": tokens}
