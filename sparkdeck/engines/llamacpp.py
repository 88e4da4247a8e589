"""llama.cpp's llama-server: context size, GPU layers, --no-mmap on unified memory, --metrics."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sparkdeck.config.schema import Option
from sparkdeck.engines.base import EndpointProbe, EngineKind, stated_size_option, unsized_claim
from sparkdeck.guard.claims import GIB, GgufUnreadable, MemoryClaim, read_gguf_shape, stated_claim
from sparkdeck.metrics.mapping import MetricsMap

if TYPE_CHECKING:
    import httpx

    from sparkdeck.config.settings import GuardSettings
    from sparkdeck.presets import Preset


# llama-server's environment spellings of "no mmap": LLAMA_ARG_NO_MMAP for --no-mmap (older
# builds), LLAMA_ARG_LOAD_MODE for --load-mode (build b11434 and later). A build reads the
# variables of the options it has; the other one is ignored, where an unknown flag is fatal.
NO_MMAP_ENV = {"LLAMA_ARG_NO_MMAP": "1", "LLAMA_ARG_LOAD_MODE": "none"}


class LlamaCpp(EngineKind):
    name = "llamacpp"
    title = "llama.cpp"
    default_port = 8080
    default_startup_timeout = 600.0
    detect_order = 30
    version_paths = ("/props",)
    owned_flags = {
        "-c": "llamacpp.context",
        "--ctx-size": "llamacpp.context",
        "--port": "port",
        "--host": "lan",
    }
    # Beyond weights and KV: llama.cpp's compute buffers, sized by the batch (n_ubatch 512)
    # times the vocabulary and the widest layer: a few hundred MiB for 8B models, 1-2 GiB
    # for large vocabularies; the figure is the upper end, rounded.
    plan_overhead = (1.5, "llama.cpp: compute buffers for the default 512-token batch")
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
    metrics_hint = (
        "llama-server serves /metrics only with --metrics: add it to the server's "
        "arguments (sparkdeck's llama.cpp presets add it)"
    )
    # Log lines of llama-server. Older builds log load_tensors / llama_kv_cache lines; build
    # b11434 at its default verbosity (seen in the test image) only says "loading model",
    # then "initializing, n_slots" once the context and its KV cache exist, then "listening
    # on". llama.cpp captures no CUDA graphs at start-up; it reserves compute buffers.
    startup_phases = (
        ("weights loading", r"load_model: loading model|load_tensors:|llama_model_loader:"),
        ("KV-cache allocation", r"llama_kv_cache|KV self size|initializing, n_slots"),
        ("compute buffers", r"graph_reserve|compute buffer size"),
        ("ready", r"listening on http"),
    )
    options = {
        "context": Option(
            "int", 8192, "context size (-c), shared by the slots", minimum=128, maximum=4_194_304
        ),
        "gpu_layers": Option("int", 999, "layers offloaded to the GPU (-ngl)", minimum=0),
        # mmap on unified memory double-counts pages (page cache + GPU copy); NVIDIA's
        # playbook and most Spark guides turn it off.
        "no_mmap": Option("bool", True, "load weights without mmap"),
        # Older builds (and most images on Spark today) take --no-mmap; recent llama.cpp
        # (seen in build b11434) replaced it with --load-mode none and refuses --no-mmap.
        # Empty (the default): both spellings go in as environment variables, which each
        # build reads for its own option and ignores otherwise, so any build loads.
        "no_mmap_flag": Option(
            "list[str]",
            [],
            "the arguments that turn mmap off in this build; empty: "
            f"the environment ({', '.join(NO_MMAP_ENV)}), which every "
            "build understands",
        ),
        "memory_gib": stated_size_option("used when the GGUF is not on this machine"),
        "parallel": Option("int", None, "number of slots (--parallel)", minimum=1, maximum=256),
    }

    # llama-server reads no HF_HUB_OFFLINE: its own switch is --offline (LLAMA_ARG_OFFLINE),
    # which loads -hf models from the hub cache it shares with huggingface_hub (build b11434)
    offline_env = {"HF_HUB_OFFLINE": "1", "LLAMA_ARG_OFFLINE": "1"}

    def hub_files(self, preset: Preset, names: Sequence[str], tag: str) -> list[str]:
        """The one GGUF (with its splits) llama-server's -hf picks, not every quantisation."""
        from sparkdeck.models.hub_model import llama_cpp_files

        return llama_cpp_files(names, tag)

    def context_flags(self, preset: Preset) -> list[str]:
        """-c (the KV cache's tokens, shared by the slots) and the slots: the stated
        llamacpp.context / parallel, or from a preset sized from its model the plan's
        tokens (context x sequences) over that many slots."""
        opts = preset.options
        plan, _ = self.memory_plan(preset)
        if plan is None:
            flags = ["-c", str(opts["context"])]
            if opts["parallel"] is not None:
                flags += ["--parallel", str(opts["parallel"])]
            return flags
        flags = ["-c", str(plan.kv_tokens)]
        slots = plan.sequences if plan.context else opts["parallel"]
        if slots is not None:
            flags += ["--parallel", str(slots)]
        if preset.kv_cache_dtype and preset.kv_cache_dtype != "auto":
            flags += [
                "--cache-type-k",
                preset.kv_cache_dtype,
                "--cache-type-v",
                preset.kv_cache_dtype,
            ]
        return flags

    def command(self, preset: Preset) -> list[str]:
        opts = preset.options
        # A path to a .gguf inside the container loads directly; anything else is a
        # Hugging Face repo that llama-server downloads into its cache.
        model_flag = "-m" if preset.model.endswith(".gguf") else "-hf"
        argv = [
            model_flag,
            preset.model,
            "--host",
            "0.0.0.0",
            "--port",
            str(self.default_port),
            *self.context_flags(preset)[:2],
            "-ngl",
            str(opts["gpu_layers"]),
            "--metrics",
        ]
        if opts["no_mmap"]:
            argv += opts["no_mmap_flag"]
        return argv + self.context_flags(preset)[2:] + list(preset.args)

    def environment(self, preset: Preset) -> dict[str, str]:
        opts = preset.options
        return dict(NO_MMAP_ENV) if opts["no_mmap"] and not opts["no_mmap_flag"] else {}

    def memory_setting(self, preset: Preset) -> str:
        opts = preset.options
        mmap = (
            ""
            if not opts["no_mmap"]
            else (
                " " + " ".join(opts["no_mmap_flag"]) if opts["no_mmap_flag"] else " no mmap (env)"
            )
        )
        flags = self.context_flags(preset)
        rest = " " + " ".join(flags[2:]) if flags[2:] else ""
        return f"{flags[0]} {flags[1]} -ngl {preset.options['gpu_layers']}{mmap}{rest}"

    def memory_claim(self, preset: Preset, total: int, guard: GuardSettings) -> MemoryClaim:
        plan, why = self.memory_plan(preset)
        if plan is not None:
            return plan.claim()
        return unsized_claim(self._stated_claim(preset), why)

    def _stated_claim(self, preset: Preset) -> MemoryClaim:
        """GGUF size + f16 KV cache for the context when the file is here, else the stated
        size. Compute buffers are not counted (a few hundred MiB to a few GiB)."""
        host_file = local_model_file(preset)
        if host_file is None:
            return stated_claim(preset.options["memory_gib"], "llamacpp.memory_gib")
        context = preset.options["context"]
        try:
            shape = read_gguf_shape(host_file)
        except GgufUnreadable as exc:
            stated = stated_claim(preset.options["memory_gib"], "llamacpp.memory_gib")
            if stated.known:
                return stated
            size = host_file.stat().st_size
            return MemoryClaim(
                size,
                f"file size {size / GIB:.2f} GiB",
                estimated=True,
                note=f"KV cache unknown ({exc})",
            )
        kv = shape.kv_bytes(context)
        return MemoryClaim(
            shape.file_bytes + kv,
            f"GGUF {shape.file_bytes / GIB:.2f} GiB + f16 KV {kv / GIB:.2f} GiB for -c {context}"
            f" ({shape.layers} layers x {shape.kv_heads} KV heads)",
            estimated=True,
            note="compute buffers not counted",
        )

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

    def count_chat_tokens(
        self, http: httpx.Client, base_url: str, model: str, messages: list[dict[str, str]]
    ) -> int | None:
        # /tokenize takes raw text: render the chat template first, then count the way the
        # chat endpoint tokenizes its prompt (special tokens added and parsed).
        rendered = http.post(base_url + "/apply-template", json={"messages": messages})
        if rendered.status_code != 200:
            return None
        tokens = http.post(
            base_url + "/tokenize",
            json={
                "content": rendered.json().get("prompt", ""),
                "add_special": True,
                "parse_special": True,
            },
        )
        if tokens.status_code != 200:
            return None
        return len(tokens.json().get("tokens", []))


def local_model_file(preset: Preset) -> Path | None:
    """The GGUF on this machine that the container will load, when sparkdeck can find it
    (the path as written, or mapped back to the host through a bind mount in `volumes`)."""
    from sparkdeck.models.plan import gguf_on_host

    return gguf_on_host(preset.model, preset.volumes)
