"""What a launch asks Docker for, as a frozen value built from a preset by its engine kind.

The spec never holds secret values: variables such as HF_TOKEN are listed by name in
`pass_env` and read from sparkdeck's own environment only at the moment the container is
created, so they cannot end up in a file, a log line, the screen or the spec hash.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass, field


@dataclass(frozen=True)
class PortBinding:
    container_port: int
    host_port: int
    host_ip: str = "127.0.0.1"


@dataclass(frozen=True)
class Mount:
    source: str  # a host path for binds, a volume name for volumes
    target: str
    read_only: bool = False
    volume: bool = False  # a named Docker volume rather than a host directory


@dataclass(frozen=True)
class GeneratedFile:
    """A file sparkdeck writes for the engine (e.g. TensorRT-LLM's options YAML)."""

    container_path: str
    content: str


@dataclass(frozen=True)
class ContainerSpec:
    preset_id: str
    kind: str
    image: str
    command: tuple[str, ...]
    port: PortBinding
    health_path: str
    metrics_path: str | None
    entrypoint: tuple[str, ...] | None = None
    env: tuple[tuple[str, str], ...] = ()
    pass_env: tuple[str, ...] = ()
    mounts: tuple[Mount, ...] = ()
    files: tuple[GeneratedFile, ...] = ()
    gpus: bool = True
    ipc_mode: str | None = None
    shm_size: str | None = None
    startup_timeout: float = 600.0
    memlock: int = -1  # bytes; -1 = unlimited
    model: str = ""
    extra_labels: tuple[tuple[str, str], ...] = field(default=())

    def spec_hash(self) -> str:
        """A short digest of everything that shapes the container (secrets excluded)."""
        blob = json.dumps(asdict(self), sort_keys=True, default=str).encode()
        return hashlib.sha256(blob).hexdigest()[:16]

    @property
    def base_url(self) -> str:
        host = "127.0.0.1" if self.port.host_ip in ("0.0.0.0", "") else self.port.host_ip
        return f"http://{host}:{self.port.host_port}"
