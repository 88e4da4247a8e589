"""The one small interface every engine kind implements.

An engine kind knows how a preset of its kind becomes a container (argv, memory knob, env,
generated files), where its health and metrics endpoints are, and how to recognise a server
of its kind from the outside. Nothing outside `sparkdeck/engines/` branches on the kind name.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

from sparkdeck.config.schema import Option
from sparkdeck.guard.claims import MemoryClaim, stated_claim
from sparkdeck.metrics.mapping import MetricsMap
from sparkdeck.runtime.spec import GeneratedFile, Mount

if TYPE_CHECKING:  # httpx and the metrics reader load with the first request, not the presets
    import threading

    import httpx

    from sparkdeck.config.settings import GuardSettings
    from sparkdeck.metrics.reader import MetricsTarget
    from sparkdeck.metrics.sampler import MetricsPlan
    from sparkdeck.models.sizing import MemoryPlan
    from sparkdeck.presets import Preset
    from sparkdeck.runtime.pull import PullProgress

# Community-safe ceiling for a share of the unified pool on a Spark (SPARK.md: sparkrun uses
# 0.8, vLLM recipes cap at 0.85-0.87); above 0.9 the host has too little left and can wedge.
SHARE_CEILING = 0.9
DEFAULT_SHARE = 0.8
# A stated size above this is a typo (a Spark has 128 GB; a cluster of them a few times that):
# refused on load, before a huge value overflows the byte arithmetic of the fit check.
MAX_STATED_GIB = 4096.0


def unsized_claim(claim: MemoryClaim, why: str | None) -> MemoryClaim:
    """A stated-knob claim, saying why the model could not size it when the preset asked."""
    if why is None:
        return claim
    note = f"not sized from the model ({why}): the stated setting is kept"
    return MemoryClaim(
        claim.bytes, claim.basis, claim.estimated, f"{claim.note}; {note}" if claim.note else note
    )


def host_pool() -> tuple[int | None, int | None]:
    """(MemTotal, MemAvailable) now, or (None, None) where /proc/meminfo cannot be read;
    the knobs of a sized preset are shares of the pool, capped by what is available."""
    from sparkdeck.host.meminfo import MemInfoError, read_meminfo

    try:
        memory = read_meminfo()
    except MemInfoError:
        return None, None
    return memory.total, memory.available


def stated_size_option(what: str) -> Option:
    """A preset key for the memory the user knows an engine takes (GiB)."""
    return Option(
        "float",
        None,
        f"memory the engine will claim in GiB ({what})",
        minimum=0.0,
        maximum=MAX_STATED_GIB,
    )


def share_option(help_text: str) -> Option:
    return Option(
        "float",
        DEFAULT_SHARE,
        help_text,
        minimum=0.0,
        exclusive_minimum=True,
        maximum=SHARE_CEILING,
    )


@dataclass(frozen=True)
class EndpointProbe:
    """What a server answered on a few well-known paths (status code and body start)."""

    url: str
    answers: Mapping[str, tuple[int, str]] = field(default_factory=dict)

    def status(self, path: str) -> int | None:
        answer = self.answers.get(path)
        return answer[0] if answer else None

    def body(self, path: str) -> str:
        answer = self.answers.get(path)
        return answer[1] if answer and answer[0] == 200 else ""


class EngineKind:
    """Base class: subclasses set the class attributes and override what differs."""

    name: ClassVar[str]
    title: ClassVar[str]
    default_port: ClassVar[int]
    health_path: ClassVar[str] = "/health"
    metrics_path: ClassVar[str | None] = "/metrics"
    requires_model: ClassVar[bool] = True
    uses_hf_cache: ClassVar[bool] = True
    default_ipc: ClassVar[str | None] = None
    default_startup_timeout: ClassVar[float] = 600.0
    # Lower runs earlier when guessing the kind of a server; the generic fallback runs last.
    detect_order: ClassVar[int] = 50
    options: ClassVar[Mapping[str, Option]] = {}
    # Flags sparkdeck sets from an option; putting them in `args` would bypass its checks
    # (e.g. the memory-share ceiling), so the preset loader refuses them there.
    owned_flags: ClassVar[Mapping[str, str]] = {}
    # Environment variables that may hold the API key a server of this kind was started with,
    # looked up in order by the chat client (keys never go into files).
    api_key_env: ClassVar[tuple[str, ...]] = ("SPARKDECK_API_KEY", "OPENAI_API_KEY")
    # `reasoning_effort` sent when thinking is switched off, on engines that accept it:
    # gpt-oss (harmony) always reasons, and "low" is the nearest it has to off.
    thinking_off_effort: ClassVar[str | None] = None
    # Which of the engine's metric names mean what (None: sparkdeck reads no numbers).
    metrics_map: ClassVar[MetricsMap | None] = None
    # What a user does when the metrics endpoint answers "off" (404/501).
    metrics_hint: ClassVar[str] = "this engine's metrics endpoint is switched off"
    # The engine's own memory beyond weights and KV cache, as (GiB, why), for presets sized
    # from their model (sparkdeck.models.sizing); None: sparkdeck does not size this kind.
    plan_overhead: ClassVar[tuple[float, str] | None] = None
    # Start-up phases as (phase name, regular expression on a log line), in the order the
    # engine goes through them; the start-up timeline marks the first line matching each.
    startup_phases: ClassVar[tuple[tuple[str, str], ...]] = ()
    # What keeps the engine off the Hub during its start-up, set once the launch has put the
    # preset's model in the cache (sparkdeck.launch.model_step): a download inside a starting
    # container is invisible and counts against its readiness timeout and start-up watchdog.
    offline_env: ClassVar[Mapping[str, str]] = {"HF_HUB_OFFLINE": "1"}

    def container_port(self, preset: Preset) -> int:
        return self.default_port

    def command(self, preset: Preset) -> list[str]:
        """The container's argv (after the image's entrypoint). Never a shell string."""
        raise NotImplementedError

    def entrypoint(self, preset: Preset) -> list[str] | None:
        return None

    def environment(self, preset: Preset) -> dict[str, str]:
        return {}

    def mounts(self, preset: Preset) -> list[Mount]:
        return []

    def files(self, preset: Preset) -> list[GeneratedFile]:
        return []

    def health(self, preset: Preset) -> str:
        return self.health_path

    def metrics(self, preset: Preset) -> str | None:
        return self.metrics_path

    def metrics_map_for(self, options: Mapping[str, Any] | None) -> MetricsMap | None:
        """The metric names to read; `options` are a preset's kind options when known."""
        return self.metrics_map

    def hub_files(self, preset: Preset, names: Sequence[str], tag: str) -> list[str]:
        """Of the files of the preset's Hub repo (`tag`: what followed a ':' in its model),
        those the engine loads, which the launch fetches first: the whole snapshot here."""
        return list(names)

    def missing_model(self, base_url: str, preset: Preset) -> str | None:
        """Once the server answers its health path: the model it still has to fetch before it
        can serve `preset`, or None. Engines that load their model at start-up have none."""
        return None

    def pull_model(
        self,
        base_url: str,
        model: str,
        on_progress: Callable[[PullProgress], object],
        cancel: threading.Event | None = None,
    ) -> None:
        """Fetch `model` into the running server (only called for what missing_model named)."""
        raise NotImplementedError(f"{self.title} cannot pull models")

    def metrics_target(self, base_url: str, metrics_path: str | None) -> MetricsTarget | None:
        """Where the sampler reads this engine's numbers; None when it has no endpoint."""
        if not metrics_path:
            return None
        from sparkdeck.metrics.exposition import parse_body
        from sparkdeck.metrics.reader import MetricsTarget

        return MetricsTarget(
            base_url.rstrip("/") + metrics_path, self.name, parse_body, self.metrics_hint
        )

    def metrics_plan(
        self, base_url: str, metrics_path: str | None, preset: Preset | None = None
    ) -> MetricsPlan:
        """What the sampler reads for an engine of this kind at base_url; a preset adds its
        own metric names and bytes per token (stated, else its model's active weights)."""
        from sparkdeck.metrics.sampler import MetricsPlan
        from sparkdeck.models.plan import preset_bytes_per_token

        mapping = self.metrics_map_for(preset.options if preset else None)
        target = self.metrics_target(base_url, metrics_path)
        bytes_per_token = preset_bytes_per_token(preset) if preset else None
        if target is None or mapping is None:
            what = "no metrics endpoint" if target is None else "no metric names"
            return MetricsPlan(
                self.name,
                None,
                mapping,
                bytes_per_token,
                f"{self.title} has {what} sparkdeck knows: {self.metrics_hint}",
            )
        return MetricsPlan(self.name, target, mapping, bytes_per_token)

    def memory_setting(self, preset: Preset) -> str:
        """How this preset limits the engine's memory, in the engine's own words."""
        return "not set"

    def memory_claim(self, preset: Preset, total: int, guard: GuardSettings) -> MemoryClaim:
        """What this preset will take from unified memory of `total` bytes, and why.

        The default is the size the user stated in the preset (`<kind>.memory_gib`).
        """
        key = f"{self.name}.memory_gib"
        if "memory_gib" not in self.options:
            return MemoryClaim(None, f"sparkdeck cannot size a {self.title} engine")
        return stated_claim(preset.options["memory_gib"], key)

    def memory_plan(self, preset: Preset) -> tuple[MemoryPlan | None, str | None]:
        """(plan, None) when the preset is sized from its model, (None, why) when it asks to
        be but its model cannot be read (the stated knob is kept), (None, None) otherwise."""
        from sparkdeck.models.plan import plan_or_reason

        return plan_or_reason(preset)

    def cross_check(
        self, preset_values: Mapping[str, Any], options: Mapping[str, Any]
    ) -> list[tuple[str, str]]:
        """Problems that involve more than one key, as (dotted key, message) pairs."""
        return []

    def thinking_fields(self, enabled: bool) -> dict[str, Any]:
        """Chat-request body fields that turn the model's thinking on or off on this engine.

        The default is how Qwen-style chat templates are switched on servers that render
        templates with request kwargs: `enable_thinking` (Qwen3, GLM) and `thinking`
        (DeepSeek-V3.1); a template ignores the variables it does not use.
        """
        fields: dict[str, Any] = {
            "chat_template_kwargs": {"enable_thinking": enabled, "thinking": enabled}
        }
        if not enabled and self.thinking_off_effort:
            fields["reasoning_effort"] = self.thinking_off_effort
        return fields

    def identify(self, probe: EndpointProbe) -> bool:
        """True when the probed server looks like this engine kind."""
        return False

    # ----- benchmark facts -------------------------------------------------------------------

    # Paths whose JSON answer names the engine's version, tried in order.
    version_paths: ClassVar[tuple[str, ...]] = ("/version",)

    def exact_length_fields(self, tokens: int) -> dict[str, Any]:
        """Extra chat-request fields that make the engine generate exactly `tokens` tokens.

        A benchmark needs every request to decode the same length; {} means the engine has no
        such switch and a reply may end early at an end-of-sequence token.
        """
        return {}

    def engine_version(self, answers: Mapping[str, Any]) -> str | None:
        """The version string from the parsed JSON answers of `version_paths`."""
        for path in self.version_paths:
            answer = answers.get(path)
            if isinstance(answer, Mapping) and answer.get("version"):
                return str(answer["version"])
        return None

    def count_chat_tokens(
        self, http: httpx.Client, base_url: str, model: str, messages: list[dict[str, str]]
    ) -> int | None:
        """Prompt tokens of a chat request as the server's own tokenizer counts them,
        chat template included; None where the engine has no tokenizer endpoint."""
        return None
