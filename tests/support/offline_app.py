"""The sparkdeck app with no Docker and presets from real TOML files in a test's tmp_path:
the presets the UI tests share, the loader that counts the app's reads, the "unreachable"
Docker factory, and the texts the tests read off the dashboard.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from textual.content import Content
from textual.widget import Widget

from sparkdeck.catalog import PresetCatalog, load_catalog
from sparkdeck.runtime.client import DockerRuntime
from sparkdeck.runtime.errors import DockerUnavailable
from sparkdeck.runtime.state import EngineState
from sparkdeck.ui.app import SparkdeckApp
from sparkdeck.ui.dashboard.engine_card import EngineCard
from sparkdeck.ui.machine.environment import EnvironmentPanel

DOCKER_ERROR = "cannot reach the Docker daemon (test)"
NEVER = 3600.0  # engine poll period for tests that count reads: the timer must not fire

TINY_LLAMA = """\
title = "Tiny llama.cpp"
kind = "llamacpp"
image = "local/llama-server:test"
model = "/models/tiny.gguf"
"""

OLLAMA = """\
title = "Ollama for tests"
kind = "ollama"
image = "ollama/ollama:test"
model = "tiny:latest"
"""

# kind llamacpp requires `model`: this file loads as a problem, not as a preset.
BROKEN = """\
title = "Broken llama.cpp"
kind = "llamacpp"
image = "local/llama-server:test"
"""


def write_presets(directory: Path, files: dict[str, str]) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    for name, text in files.items():
        (directory / name).write_text(text)
    return directory


class CountingLoader:
    """The real load_catalog over one directory, counting how often the app asks."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.calls = 0

    def __call__(self) -> PresetCatalog:
        self.calls += 1
        return load_catalog([(self.directory, False)])


class UnreachableDocker:
    """Stands in for DockerRuntime.connect with no daemon: raises what connect raises."""

    def __init__(self) -> None:
        self.calls = 0

    def __call__(self) -> DockerRuntime:
        self.calls += 1
        raise DockerUnavailable(DOCKER_ERROR)


def text_of(widget: Widget) -> str:
    """The plain text a Static shows now."""
    content = widget.content  # type: ignore[attr-defined]
    return content.plain if isinstance(content, Content) else str(content)


def make_app(
    tmp_path: Path,
    files: dict[str, str] | None = None,
    docker: Callable[[], DockerRuntime] | None = None,
    **kwargs: Any,
) -> tuple[SparkdeckApp, CountingLoader]:
    directory = write_presets(
        tmp_path / "presets",
        files if files is not None else {"tiny-llama.toml": TINY_LLAMA, "ollama-test.toml": OLLAMA},
    )
    loader = CountingLoader(directory)
    kwargs.setdefault("engine_poll_seconds", NEVER)
    app = SparkdeckApp(loader, docker or UnreachableDocker(), **kwargs)
    return app, loader


def environment_text(app: SparkdeckApp) -> str:
    return text_of(app.query_one("#environment-panel", EnvironmentPanel))


def engine_text(app: SparkdeckApp) -> str:
    return text_of(app.query_one("#engine-card", EngineCard))


def engine_state(
    docker_state: str, exit_code: int | None = None, log_tail: tuple[str, ...] = ()
) -> EngineState:
    return EngineState(
        container_id="c0ffee",
        name="sparkdeck-tiny-llama",
        preset_id="tiny-llama",
        kind="llamacpp",
        image="local/llama-server:test",
        model="/models/tiny.gguf",
        base_url="http://127.0.0.1:8080",
        health_path="/health",
        metrics_path="/metrics",
        spec_hash="abc",
        docker_state=docker_state,
        exit_code=exit_code,
        started_at="2025-01-01T00:00:00.123456789Z",
        log_tail=log_tail,
    )


NOW = 1735689600.0 + 125.5  # 2 min 5 s after engine_state()'s StartedAt
