"""What `containers.create` is asked for one engine: the docker SDK's arguments built from a
ContainerSpec (mounts, generated files, environment, ports, limits, GPUs).

Kept apart from the client's lifecycle calls: this is the one place a preset's wishes turn
into Docker's words, and it touches the disk only to create a missing bind source and to
write the launch's generated files.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import docker.types

from sparkdeck.config import paths
from sparkdeck.runtime.spec import ContainerSpec
from sparkdeck.runtime.state import container_labels

STACK_BYTES = 64 * 1024 * 1024  # NVIDIA's playbooks: --ulimit stack=67108864


def create_kwargs(spec: ContainerSpec, name: str, scope: str, files_folder: Path) -> dict[str, Any]:
    """`containers.create` arguments for `spec` under container `name`; generated files are
    written into `files_folder` and bind-mounted read-only."""
    mounts = []
    for m in spec.mounts:
        # A missing bind source is created as a directory (what `docker run -v` does);
        # an existing one, file or directory, is mounted as it is.
        if not m.volume and not Path(m.source).exists():
            Path(m.source).mkdir(parents=True, exist_ok=True)
        mounts.append(
            docker.types.Mount(
                m.target, m.source, read_only=m.read_only, type="volume" if m.volume else "bind"
            )
        )
    for generated in spec.files:
        host_path = files_folder / Path(generated.container_path).name
        # 0644, unlike the rest of the data dir: the engine in the container may run
        # as another user and must read it (it holds options, never secrets).
        paths.atomic_write_text(host_path, generated.content, mode=0o644)
        mounts.append(
            docker.types.Mount(
                generated.container_path, str(host_path), type="bind", read_only=True
            )
        )
    environment = dict(spec.env)
    # Secrets come from sparkdeck's environment at this moment and go nowhere else.
    environment.update({k: os.environ[k] for k in spec.pass_env if k in os.environ})
    kwargs: dict[str, Any] = {
        "image": spec.image,
        "command": list(spec.command),
        "name": name,
        "labels": container_labels(spec, scope),
        "environment": environment,
        "ports": {f"{spec.port.container_port}/tcp": (spec.port.host_ip, spec.port.host_port)},
        "mounts": mounts,
        "detach": True,
        "ulimits": ulimits(spec),
    }
    if spec.entrypoint is not None:
        kwargs["entrypoint"] = list(spec.entrypoint)
    if spec.gpus:
        kwargs["device_requests"] = [docker.types.DeviceRequest(count=-1, capabilities=[["gpu"]])]
    if spec.ipc_mode and spec.ipc_mode != "private":
        kwargs["ipc_mode"] = spec.ipc_mode
    if spec.shm_size:
        kwargs["shm_size"] = spec.shm_size
    return kwargs


def ulimits(spec: ContainerSpec) -> list[docker.types.Ulimit]:
    """The limits runc sets before the engine runs (the launch and its probe share them)."""
    return [
        docker.types.Ulimit(name="memlock", soft=spec.memlock, hard=spec.memlock),
        docker.types.Ulimit(name="stack", soft=STACK_BYTES, hard=STACK_BYTES),
    ]
