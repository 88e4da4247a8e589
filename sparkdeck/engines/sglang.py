"""SGLang: `python3 -m sglang.launch_server`, metrics only with --enable-metrics."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from sparkdeck.engines.base import EndpointProbe, EngineKind, share_option

if TYPE_CHECKING:
    from sparkdeck.presets import Preset


class SGLang(EngineKind):
    name = "sglang"
    version_paths = ("/version", "/get_server_info")
    title = "SGLang"
    default_port = 30000
    default_ipc = "host"
    default_startup_timeout = 900.0
    detect_order = 20
    owned_flags = {"--mem-fraction-static": "sglang.mem_fraction_static",
                   "--port": "port", "--host": "lan"}
    options = {
        "mem_fraction_static": share_option(
            "(weights + KV pool) / whole pool; activations and CUDA graphs come on top"
        ),
    }

    def command(self, preset: Preset) -> list[str]:
        return ["python3", "-m", "sglang.launch_server", "--model-path", preset.model,
                "--host", "0.0.0.0", "--port", str(self.default_port),
                "--mem-fraction-static", f"{preset.options['mem_fraction_static']:g}",
                "--enable-metrics", *preset.args]

    def memory_setting(self, preset: Preset) -> str:
        return f"--mem-fraction-static {preset.options['mem_fraction_static']:g}"

    def identify(self, probe: EndpointProbe) -> bool:
        return "sglang:" in probe.body("/metrics") or probe.status("/get_server_info") == 200

    def exact_length_fields(self, tokens: int) -> dict[str, Any]:
        # SGLang's ChatCompletionRequest takes both as sampling parameters.
        return {"ignore_eos": True, "min_tokens": tokens}
