"""Typed errors of the Docker runtime, and the messages that tell a user what to do.

The docker SDK reports most failures as APIError with the daemon's text; the mapping from
those texts (seen on a real daemon, see shared TESTING.md) to advice lives here in one place.
"""

from __future__ import annotations

from collections.abc import Sequence

DOCKER_TIMEOUT_S = 5
"""How long sparkdeck waits for the Docker daemon to answer one call a user waits on (a
status read, an engine poll, a stop request). A healthy daemon answers in milliseconds; one
that is stopped, hung or swamped gives no reply at all, and the screen must say so within
seconds instead of freezing for the SDK's 60 s default. Calls that may rightly take long get
their own bound: a pull, a create/start (LIFECYCLE_TIMEOUT_S), and a stop (its grace on top)."""

LIFECYCLE_TIMEOUT_S = 60
"""Per-read bound for calls that may rightly take long on a busy host: pulling an image and
creating or starting a container (an NVIDIA runtime hook can take seconds)."""


class DockerRuntimeError(Exception):
    """Base of every error the Docker runtime raises."""


class DockerUnavailable(DockerRuntimeError):
    """The Docker daemon cannot be reached."""


class DockerNotAnswering(DockerUnavailable):
    """The daemon accepted the connection but sent no reply in time (stopped, hung, swamped).

    A subclass of DockerUnavailable, so every caller that copes with a missing daemon copes
    with this one; those that can say more (the engine card, `status`) tell them apart."""

    def __init__(self, seconds: float, detail: str = ""):
        super().__init__(not_answering_message(seconds))
        self.seconds = seconds
        self.detail = detail


def not_answering_message(seconds: float) -> str:
    return (
        f"Docker is not answering (no reply within {seconds:g} s): the daemon may be stopped, "
        "hung or overloaded. sparkdeck cannot read, start or stop engines through it until it "
        "answers again; the memory guard keeps watching and will kill the engine's processes "
        "directly if it must."
    )


def is_timeout_text(text: str) -> bool:
    """Does an SDK/requests message say a read or connect timed out? (requests reports a
    timeout while reading a body as ConnectionError, and docker.from_env() wraps one in
    DockerException("Error while fetching server API version: ... Read timed out"))."""
    lower = text.lower()
    return "timed out" in lower or "timeout" in lower


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


def memlock_hint() -> str:
    """The number to put in a preset's `memlock` (bytes), from this host's hard limit.

    `ulimit -Hl` prints KiB while the preset takes bytes, hence the x 1024 people miss.
    """
    import resource

    hard = resource.getrlimit(resource.RLIMIT_MEMLOCK)[1]
    if hard == resource.RLIM_INFINITY:
        return (
            "`ulimit -Hl` (in KiB) x 1024, in bytes, as the user dockerd runs as (this "
            "shell's limit is unlimited, so dockerd's differs)"
        )
    return (
        f"`ulimit -Hl` x 1024, in bytes: here {hard // 1024} x 1024 = "
        f"`memlock = {hard}` (if dockerd runs with this shell's limit)"
    )


def explain_start_failure(
    text: str, image: str, host_ip: str, host_port: int, command: Sequence[str]
) -> str:
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
            "in the preset to what this host allows: " + memlock_hint()
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
    if any(
        s in lower
        for s in (
            "no such host",
            "dial tcp",
            "i/o timeout",
            "connection refused",
            "network is unreachable",
            "tls handshake timeout",
            "temporary failure in name resolution",
        )
    ):
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
