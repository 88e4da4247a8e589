"""Any OpenAI-compatible server image (a new engine such as Atlas, a custom build).

The user states what sparkdeck cannot know: the port inside the container, the health and
metrics paths, the command, and how much memory the engine will take.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, ClassVar

from sparkdeck.config.schema import Option
from sparkdeck.engines.base import MAX_STATED_GIB, EndpointProbe, EngineKind
from sparkdeck.metrics.mapping import MetricsMap, map_from_table, table_problems

if TYPE_CHECKING:
    from sparkdeck.presets import Preset


class OpenAICompatible(EngineKind):
    name = "openai"
    title = "OpenAI-compatible (custom)"
    default_port = 8000
    requires_model = False
    # For a server sparkdeck did not start, /v1/models is the one path every OpenAI-compatible
    # server has; a preset of this kind states its own health path instead.
    health_path = "/v1/models"
    metrics_path = None
    detect_order = 99  # the fallback: anything that answers /v1/models
    # sparkdeck cannot know how a custom server gets its model (the preset's `model` is only
    # shown): a launch does not download it first, and the server is not told to be offline
    offline_env: ClassVar[Mapping[str, str]] = {}
    metrics_hint = (
        "state the server's Prometheus path and what its names mean in the preset: "
        '[openai] metrics_path = "/metrics" and metrics_map = {generation_tokens '
        '= "...", running = "..."}'
    )
    options = {
        "container_port": Option(
            "int",
            None,
            "port the server listens on inside the container",
            minimum=1,
            maximum=65535,
            required=True,
        ),
        "health_path": Option("str", "/health", "path that answers 200 once the server is ready"),
        "metrics_path": Option("str", "", "Prometheus metrics path; empty when there is none"),
        "metrics_map": Option(
            "table[str]",
            {},
            "which of the server's metric names mean "
            'what, e.g. {generation_tokens = "atlas:gen_tokens_total"}',
        ),
        "command": Option(
            "list[str]",
            [],
            "argv after the image's entrypoint ([] keeps the "
            "image's own command; args are appended)",
        ),
        "entrypoint": Option("list[str]", None, "replace the image's entrypoint"),
        "memory_gib": Option(
            "float",
            None,
            "memory the engine will claim, as you know it",
            minimum=0.0,
            maximum=MAX_STATED_GIB,
        ),
    }

    def container_port(self, preset: Preset) -> int:
        return preset.options["container_port"]

    def command(self, preset: Preset) -> list[str]:
        return [*preset.options["command"], *preset.args]

    def entrypoint(self, preset: Preset) -> list[str] | None:
        return preset.options["entrypoint"]

    def health(self, preset: Preset) -> str:
        return preset.options["health_path"]

    def metrics(self, preset: Preset) -> str | None:
        return preset.options["metrics_path"] or None

    def metrics_map_for(self, options: Mapping[str, Any] | None) -> MetricsMap | None:
        table = (options or {}).get("metrics_map") or {}
        return map_from_table(table) if table else None

    def memory_setting(self, preset: Preset) -> str:
        gib = preset.options["memory_gib"]
        return f"{gib:g} GiB (stated in the preset)" if gib is not None else "not stated"

    def cross_check(
        self, preset_values: Mapping[str, Any], options: Mapping[str, Any]
    ) -> list[tuple[str, str]]:
        problems = []
        for key in ("health_path", "metrics_path"):
            value = options.get(key) or ""
            if value and not value.startswith("/"):
                problems.append((f"openai.{key}", f"{value!r} must start with '/'"))
        problems += [
            ("openai.metrics_map", why) for why in table_problems(options.get("metrics_map") or {})
        ]
        return problems

    def identify(self, probe: EndpointProbe) -> bool:
        return '"data"' in probe.body("/v1/models")
