"""Checks a launch makes before it touches the running engine.

A switch stops the working engine first; a new engine that then fails to start for a reason
that could have been seen beforehand (its host port is taken, Docker has no GPU runtime, the
preset does not make a container spec) leaves the user with nothing running. Everything that
can be checked without stopping the old engine is checked here, and a failure raises
PreflightFailed while the old engine still serves.

The port check binds the preset's host address and port the way docker-proxy will. A port
held by one of sparkdeck's own engines counts as free: the switch stops that engine first.
"""

from __future__ import annotations

import errno
import shutil
import socket
from collections.abc import Collection
from typing import TYPE_CHECKING

from sparkdeck.presets import Preset, PresetError
from sparkdeck.runtime.errors import LaunchError
from sparkdeck.runtime.spec import ContainerSpec

if TYPE_CHECKING:
    import docker

# The binary the NVIDIA container toolkit installs; with it on the daemon's host, Docker can
# serve `--gpus` requests even where no `nvidia` runtime is registered in daemon.json.
NVIDIA_HOOK = "nvidia-container-runtime-hook"

GPU_RUNTIME_MISSING = (
    "the preset asks for the GPU (gpus = true) but Docker here has no NVIDIA container "
    "runtime (no `nvidia` in `docker info` Runtimes, no nvidia-container-toolkit). Install the "
    "toolkit and run `sudo nvidia-ctk runtime configure --runtime=docker`, then restart "
    "Docker; or set `gpus = false` in the preset for a host without the NVIDIA runtime. The "
    "running engine, if any, was not touched."
)


class PreflightFailed(LaunchError):
    """A launch was refused before anything was stopped or started; the message says why."""


def container_spec(preset: Preset) -> ContainerSpec:
    """The preset's container spec, or PreflightFailed naming what makes it invalid."""
    try:
        return preset.container_spec()
    except (PresetError, ValueError, KeyError, TypeError) as exc:
        raise PreflightFailed(
            f"preset {preset.id} is not valid: {exc}; nothing was touched"
        ) from exc


def port_problem(host_ip: str, port: int) -> str | None:
    """Why `host_ip:port` cannot be bound now (another program holds it), or None if free.

    SO_REUSEADDR as docker-proxy (Go) sets it: a port in TIME_WAIT is free for it too, while
    a listening socket on the address or on 0.0.0.0 still refuses the bind.
    """
    family = socket.AF_INET6 if ":" in host_ip else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((host_ip or "0.0.0.0", port))
        except OSError as exc:
            if exc.errno == errno.EADDRINUSE:
                return (
                    f"port {port} on {host_ip} is already in use by another program; "
                    "stop it or give the preset another port"
                )
            if exc.errno == errno.EADDRNOTAVAIL:
                return (
                    f"address {host_ip} is not on this host: the preset's port {port} "
                    "cannot be published there"
                )
            if exc.errno == errno.EACCES:
                return None  # a privileged port: dockerd binds it as root, we cannot tell
            return f"port {port} on {host_ip} cannot be bound: {exc.strerror}"
    return None


def check_port(spec: ContainerSpec, freed_ports: Collection[int]) -> None:
    """Raise PreflightFailed when the new engine's host port is taken by anything but an
    engine the launch stops first (`freed_ports`)."""
    if spec.port.host_port in freed_ports:
        return
    problem = port_problem(spec.port.host_ip, spec.port.host_port)
    if problem:
        raise PreflightFailed(
            f"{spec.preset_id} not launched: {problem}. The running engine, if any, keeps running."
        )


def gpu_runtime_present(runtimes: Collection[str], local_daemon: bool) -> bool:
    """Can Docker give a container the GPU? `runtimes` are `docker info`'s runtime names."""
    if "nvidia" in runtimes:
        return True
    return local_daemon and shutil.which(NVIDIA_HOOK) is not None


def check_gpu(spec: ContainerSpec, runtimes: Collection[str], local_daemon: bool) -> None:
    if spec.gpus and not gpu_runtime_present(runtimes, local_daemon):
        raise PreflightFailed(f"{spec.preset_id} not launched: {GPU_RUNTIME_MISSING}")


def check_limits(client: docker.DockerClient, spec: ContainerSpec, scope: str) -> None:
    """Raise PreflightFailed when Docker cannot give the container its limits (`memlock`
    above what dockerd may grant): seen by a probe container now, not after the stop and
    the flush (sparkdeck.runtime.limits_probe)."""
    from sparkdeck.runtime.limits_probe import limits_problem

    problem = limits_problem(client, spec, scope)
    if problem:
        raise PreflightFailed(
            f"{spec.preset_id} not launched: {problem}. Seen by a probe "
            "before anything was stopped or flushed: the running engine, if "
            "any, keeps running."
        )
