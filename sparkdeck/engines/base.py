"""The one small interface every engine kind implements.

An engine kind knows how a preset of its kind becomes a container (argv, memory knob, env,
generated files), where its health and metrics endpoints are, and how to recognise a server
of its kind from the outside. Nothing outside `sparkdeck/engines/` branches on the kind name.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

from sparkdeck.container_spec import GeneratedFile, Mount
from sparkdeck.guard.claims import MemoryClaim, stated_claim
from sparkdeck.metrics.mapping import MetricsMap
from sparkdeck.schema import Option

if TYPE_CHECKING:  # httpx and the metrics reader load with the first request, not the presets
    import threading

    import httpx

    from sparkdeck.metrics.reader import MetricsTarget
    from sparkdeck.presets import Preset
    from sparkdeck.pull_progress import PullProgress
    from sparkdeck.settings import GuardSettings

# Community-safe ceiling for a share of the unified pool on a Spark (SPARK.md: sparkrun uses
# 0.8, vLLM recipes cap at 0.85-0.87); above 0.9 the host has too little left and can wedge.
SHARE_CEILING = 0.9
DEFAULT_SHARE = 0.8


def stated_size_option(what: str) -> Option:
    """A preset key for the memory the user knows an engine takes (GiB)."""
    return Option("float", None, f"memory the engine will claim in GiB ({what})", minimum=0.0)


def share_option(help_text: str) -> Option:
    return Option(
        "float", DEFAULT_SHARE, help_text, minimum=0.0, exclusive_minimum=True,
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
    # Start-up phases as (phase name, regular expression on a log line), in the order the
    # engine goes through them; the start-up timeline marks the first line matching each.
    startup_phases: ClassVar[tuple[tuple[str, str], ...]] = ()

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

    def missing_model(self, base_url: str, preset: Preset) -> str | None:
        """Once the server answers its health path: the model it still has to fetch before it
        can serve `preset`, or None. Engines that load their model at start-up have none."""
        return None

    def pull_model(self, base_url: str, model: str,
                   on_progress: Callable[[PullProgress], None],
                   cancel: threading.Event | None = None) -> None:
        """Fetch `model` into the running server (only called for what missing_model named)."""
        raise NotImplementedError(f"{self.title} cannot pull models")

    def metrics_target(self, base_url: str, metrics_path: str | None) -> MetricsTarget | None:
        """Where the sampler reads this engine's numbers; None when it has no endpoint."""
        if not metrics_path:
            return None
        from sparkdeck.metrics.exposition import parse_body
        from sparkdeck.metrics.reader import MetricsTarget

        return MetricsTarget(base_url.rstrip("/") + metrics_path, self.name, parse_body,
                             self.metrics_hint)

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

    def cross_check(self, preset_values: Mapping[str, Any], options: Mapping[str, Any]) -> list[
        tuple[str, str]
    ]:
        """Problems that involve more than one key, as (dotted key, message) pairs."""
        return []

    def thinking_fields(self, enabled: bool) -> dict[str, Any]:
        """Chat-request body fields that turn the model's thinking on or off on this engine.

        The default is how Qwen-style chat templates are switched on servers that render
        templates with request kwargs: `enable_thinking` (Qwen3, GLM) and `thinking`
        (DeepSeek-V3.1); a template ignores the variables it does not use.
        """
        fields: dict[str, Any] = {
            "chat_template_kwargs": {"enable_thinking": enabled, "thinking": enabled}}
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

    def count_chat_tokens(self, http: httpx.Client, base_url: str, model: str,
                          messages: list[dict[str, str]]) -> int | None:
        """Prompt tokens of a chat request as the server's own tokenizer counts them,
        chat template included; None where the engine has no tokenizer endpoint."""
        return None
