"""Typed errors of the Docker runtime, and the messages that tell a user what to do.

The docker SDK reports most failures as APIError with the daemon's text; the mapping from
those texts (seen on a real daemon, see shared TESTING.md) to advice lives here in one place.
"""

from __future__ import annotations

from collections.abc import Sequence


class DockerRuntimeError(Exception):
    """Base of every error the Docker runtime raises."""


class DockerUnavailable(DockerRuntimeError):
    """The Docker daemon cannot be reached."""


class ImagePullError(DockerRuntimeError):
    """An image could not be pulled."""


class LaunchError(DockerRuntimeError):
    """The container could not be created or started; nothing was left behind."""


class ModelPullError(LaunchError):
    """The engine could not get the preset's model (an Ollama pull failed or was refused);
    the launch stops and removes the container."""


class NotManaged(DockerRuntimeError):
    """sparkdeck was asked to act on a container it did not create."""


class EngineExited(DockerRuntimeError):
    """The engine's container stopped while sparkdeck waited for it."""

    def __init__(self, message: str, exit_code: int | None, log_tail: Sequence[str]):
        super().__init__(message)
        self.exit_code = exit_code
        self.log_tail = list(log_tail)


class ReadinessTimeout(DockerRuntimeError):
    """The engine did not answer its health endpoint in time."""

    def __init__(self, message: str, log_tail: Sequence[str]):
        super().__init__(message)
        self.log_tail = list(log_tail)


def unavailable_message(detail: str) -> str:
    return (
        f"cannot reach the Docker daemon ({detail}). Start it (`sudo systemctl start docker`), "
        "make sure your user may use it (`sudo usermod -aG docker $USER`, then log in again), "
        "or point DOCKER_HOST at the right socket."
    )


def explain_start_failure(text: str, image: str, host_ip: str, host_port: int,
                          command: Sequence[str]) -> str:
    """Turn the daemon's text for a failed create/start into advice."""
    lower = text.lower()
    if "could not select device driver" in lower and "gpu" in lower:
        return (
            "Docker cannot give this container a GPU: the NVIDIA container runtime "
            "(nvidia-container-toolkit) is not installed or not configured for Docker. Install "
            "it, run `sudo nvidia-ctk runtime configure --runtime=docker` and restart Docker; "
            "or set `gpus = false` in the preset to run without a GPU."
        )
    if "unknown runtime specified nvidia" in lower:
        return (
            "Docker does not know the `nvidia` runtime: install nvidia-container-toolkit and run "
            "`sudo nvidia-ctk runtime configure --runtime=docker`, then restart Docker."
        )
    if "error setting rlimit" in lower:
        # runc names the limit by number: 8 is RLIMIT_MEMLOCK, 3 is RLIMIT_STACK.
        which = "locked memory (memlock)" if "type 8" in lower else "a resource limit"
        return (
            f"Docker could not raise the container's {which} limit: the Docker daemon itself "
            "runs with a lower limit. Give dockerd an unlimited one (`LimitMEMLOCK=infinity` "
            "in a systemd drop-in for docker.service, then restart Docker), or set `memlock` "
            "in the preset to what this host allows."
        )
    if "port is already allocated" in lower or "address already in use" in lower:
        return (
            f"port {host_port} on {host_ip} is already in use by another program or container: "
            "stop it, or change `port` in the preset."
        )
    if ("executable file not found" in lower or "no such file or directory" in lower) and (
        "exec" in lower
    ):
        argv0 = command[0] if command else "(the image's entrypoint)"
        return (
            f"the command {argv0!r} does not exist in image {image}: check the preset's "
            "command/entrypoint for this image."
        )
    if "bind source path does not exist" in lower:
        missing = text.rsplit(":", 1)[-1].strip()
        return f"the host path {missing} named in the preset's `volumes` does not exist."
    if "no such image" in lower:
        return f"image {image} is not present and could not be pulled."
    return f"Docker refused to start the container: {text.strip()}"


def explain_pull_failure(text: str, image: str) -> str:
    lower = text.lower()
    if any(s in lower for s in ("no such host", "dial tcp", "i/o timeout", "connection refused",
                                "network is unreachable", "tls handshake timeout",
                                "temporary failure in name resolution")):
        return (
            f"cannot pull {image}: the registry is unreachable from this machine ({text.strip()}). "
            "Check the network or proxy, or load the image by hand (`docker load`)."
        )
    if "unauthorized" in lower or "denied" in lower or "authentication required" in lower:
        registry = image.split("/", 1)[0] if "." in image.split("/", 1)[0] else "docker.io"
        return (
            f"the registry refused to hand out {image} ({text.strip()}): log in with "
            f"`docker login {registry}` (for nvcr.io the user is $oauthtoken and the password "
            "your NGC API key)."
        )
    if "manifest unknown" in lower or "not found" in lower:
        return f"image {image} does not exist in its registry ({text.strip()}): check the tag."
    return f"cannot pull {image}: {text.strip()}"
