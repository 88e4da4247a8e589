"""llama.cpp's llama-server: context size, GPU layers, --no-mmap on unified memory, --metrics."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import httpx

from sparkdeck.engines.base import EndpointProbe, EngineKind
from sparkdeck.metrics.mapping import MetricsMap
from sparkdeck.schema import Option

if TYPE_CHECKING:
    from sparkdeck.presets import Preset


class LlamaCpp(EngineKind):
    name = "llamacpp"
    title = "llama.cpp"
    default_port = 8080
    default_startup_timeout = 600.0
    detect_order = 30
    version_paths = ("/props",)
    owned_flags = {"-c": "llamacpp.context", "--ctx-size": "llamacpp.context",
                   "--port": "port", "--host": "lan"}
    api_key_env = ("LLAMA_API_KEY", *EngineKind.api_key_env)  # what llama-server reads
    # tools/server/server.cpp (seen on build b11434). Token counters move when a request
    # ends; tokens over the seconds spent generating is the speed of one stream. Cached
    # prompt tokens over all prompt tokens is the prefix-cache hit rate.
    metrics_map = MetricsMap(
        generation_tokens=("llamacpp:tokens_predicted_total",),
        prompt_tokens=("llamacpp:prompt_tokens_total",),
        generation_seconds=("llamacpp:tokens_predicted_seconds_total",),
        running=("llamacpp:requests_processing",),
        waiting=("llamacpp:requests_deferred",),
        prefix_hits=("llamacpp:prompt_tokens_cached_total",),
        prefix_misses=("llamacpp:prompt_tokens_total",),
        spec_accepted=("llamacpp:spec_decode_num_accepted_tokens_total",),
        spec_drafted=("llamacpp:spec_decode_num_draft_tokens_total",),
        counters_move_at_request_end=True,
        note="llama-server reports no KV-cache use or TTFT histogram",
    )
    metrics_hint = ("llama-server serves /metrics only with --metrics: add it to the server's "
                    "arguments (sparkdeck's llama.cpp presets add it)")
    options = {
        "context": Option("int", 8192, "context size (-c), shared by the slots",
                          minimum=128, maximum=4_194_304),
        "gpu_layers": Option("int", 999, "layers offloaded to the GPU (-ngl)", minimum=0),
        # mmap on unified memory double-counts pages (page cache + GPU copy); NVIDIA's
        # playbook and most Spark guides turn it off.
        "no_mmap": Option("bool", True, "load weights without mmap"),
        # Older builds (and most images on Spark today) take --no-mmap; recent llama.cpp
        # (seen in build b11434) replaced it with --load-mode none.
        "no_mmap_flag": Option("list[str]", ["--no-mmap"],
                               "the arguments that turn mmap off in this build"),
        "parallel": Option("int", None, "number of slots (--parallel)", minimum=1, maximum=256),
    }

    def command(self, preset: Preset) -> list[str]:
        opts = preset.options
        # A path to a .gguf inside the container loads directly; anything else is a
        # Hugging Face repo that llama-server downloads into its cache.
        model_flag = "-m" if preset.model.endswith(".gguf") else "-hf"
        argv = [model_flag, preset.model, "--host", "0.0.0.0", "--port", str(self.default_port),
                "-c", str(opts["context"]), "-ngl", str(opts["gpu_layers"]), "--metrics"]
        if opts["no_mmap"]:
            argv += opts["no_mmap_flag"]
        if opts["parallel"] is not None:
            argv += ["--parallel", str(opts["parallel"])]
        return argv + list(preset.args)

    def memory_setting(self, preset: Preset) -> str:
        mmap = " " + " ".join(preset.options["no_mmap_flag"]) if preset.options["no_mmap"] else ""
        return f"-c {preset.options['context']} -ngl {preset.options['gpu_layers']}{mmap}"

    def identify(self, probe: EndpointProbe) -> bool:
        return "llamacpp:" in probe.body("/metrics") or (
            "default_generation_settings" in probe.body("/props")
        )

    def exact_length_fields(self, tokens: int) -> dict[str, Any]:
        # llama-server keeps sampling past EOS with ignore_eos; max_tokens caps the length.
        return {"ignore_eos": True}

    def engine_version(self, answers: Mapping[str, Any]) -> str | None:
        props = answers.get("/props")
        if isinstance(props, Mapping) and props.get("build_info"):
            return str(props["build_info"])  # e.g. "b11434-<commit>"
        return super().engine_version(answers)

    def count_chat_tokens(self, http: httpx.Client, base_url: str, model: str,
                          messages: list[dict[str, str]]) -> int | None:
        # /tokenize takes raw text: render the chat template first, then count the way the
        # chat endpoint tokenizes its prompt (special tokens added and parsed).
        rendered = http.post(base_url + "/apply-template", json={"messages": messages})
        if rendered.status_code != 200:
            return None
        tokens = http.post(base_url + "/tokenize", json={
            "content": rendered.json().get("prompt", ""), "add_special": True,
            "parse_special": True})
        if tokens.status_code != 200:
            return None
        return len(tokens.json().get("tokens", []))
