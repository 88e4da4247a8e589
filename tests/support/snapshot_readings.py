"""The fixed readings of the snapshot tests: no Docker, an hour-long sampling period, a ready
engine's state.
"""

from __future__ import annotations

from sparkdeck.runtime.client import DockerRuntime
from sparkdeck.runtime.errors import DockerUnavailable
from sparkdeck.runtime.state import EngineState

HOUR = 3600.0


def no_docker() -> DockerRuntime:
    raise DockerUnavailable("cannot reach the Docker daemon (snapshot test)")


READY = EngineState(
    container_id="c0ffee000001",
    name="sparkdeck-tiny-llama",
    preset_id="tiny-llama",
    kind="llamacpp",
    image="local/llama-server:test",
    model="/models/tiny.gguf",
    base_url="http://127.0.0.1:8080",
    health_path="/health",
    metrics_path="/metrics",
    spec_hash="0" * 12,
    docker_state="running",
    exit_code=None,
    started_at=None,
    published_on="127.0.0.1",
)
