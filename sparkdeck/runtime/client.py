"""The Docker side of an engine's life: pull, create and start, readiness, stop, adopt, logs.

Everything goes through the docker SDK and returns frozen snapshots (EngineState) or raises
the typed errors of sparkdeck.runtime.errors. sparkdeck only ever stops or removes containers
that carry its `io.sparkdeck.managed` label in its own scope; anything else is left alone.
"""

from __future__ import annotations

import copy
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import docker
import docker.errors
import requests.exceptions

from sparkdeck.config import paths
from sparkdeck.runtime import readiness
from sparkdeck.runtime.create import create_kwargs
from sparkdeck.runtime.errors import (
    DOCKER_TIMEOUT_S,
    LIFECYCLE_TIMEOUT_S,
    EngineExited,
    ImagePullError,
    LaunchError,
    NotManaged,
    explain_pull_failure,
    explain_start_failure,
)
from sparkdeck.runtime.logs import LogFollower, stamped_lines
from sparkdeck.runtime.pull import PullProgress, split_reference
from sparkdeck.runtime.sdk import api_text, daemon_errors, engine_state, has_exited
from sparkdeck.runtime.spec import ContainerSpec
from sparkdeck.runtime.state import (
    ALIVE_STATES,
    MANAGED,
    SCOPE,
    EngineState,
    default_scope,
    docker_time,
)

LOG_TAIL_LINES = 50


class DockerRuntime:
    """sparkdeck's engine containers on one Docker daemon, within one scope."""

    def __init__(
        self,
        client: docker.DockerClient,
        scope: str | None = None,
        files_dir: Path | None = None,
        lifecycle_client: docker.DockerClient | None = None,
    ):
        self.client = client
        # Pull, create and start may rightly take longer than a read (see LIFECYCLE_TIMEOUT_S)
        self.lifecycle = lifecycle_client or client
        self.scope = scope or default_scope()
        self.files_dir = files_dir or paths.data_dir() / "launch-files"

    @classmethod
    def connect(
        cls,
        base_url: str | None = None,
        scope: str | None = None,
        timeout: float = DOCKER_TIMEOUT_S,
    ) -> DockerRuntime:
        """Connect to the daemon (DOCKER_HOST or the default socket) and check it answers.

        Every call then waits at most `timeout` seconds for a reply (DockerNotAnswering
        after that), except the lifecycle calls, which get LIFECYCLE_TIMEOUT_S."""

        def client_with(seconds: float, version: str | None = None) -> docker.DockerClient:
            if base_url:
                return docker.DockerClient(base_url=base_url, timeout=seconds, version=version)
            return docker.from_env(timeout=seconds, version=version)

        with daemon_errors(timeout):
            client = client_with(timeout)
            client.ping()
            # the API version is known now: this second client makes no call to build
            lifecycle = client_with(LIFECYCLE_TIMEOUT_S, client.api.api_version)
        return cls(client, scope=scope, lifecycle_client=lifecycle)

    def with_timeout(self, seconds: float) -> DockerRuntime:
        """The same daemon and scope through a client whose every call gives up after
        `seconds`: the memory guard's stop must not wait on a daemon that does not answer.
        The connection pool is shared; only the timeout differs (the SDK reads it on each
        request)."""
        api = copy.copy(self.client.api)
        api.timeout = seconds
        client = copy.copy(self.client)
        client.api = api
        return DockerRuntime(client, scope=self.scope, files_dir=self.files_dir)

    # ----- reading -------------------------------------------------------------------------

    def _ours(self, container: Any) -> bool:
        labels = container.labels or {}
        return labels.get(MANAGED) == "true" and labels.get(SCOPE) == self.scope

    def _state(self, container: Any, with_logs: bool | None = None) -> EngineState:
        """The container as an EngineState; its log tail when asked, or by default when
        it has exited (why it stopped)."""
        with_logs = has_exited(container) if with_logs is None else with_logs
        return engine_state(container, tuple(self.log_tail(container)) if with_logs else ())

    def engines(self) -> list[EngineState]:
        """Every container of this scope, alive or not, newest first."""
        with daemon_errors():
            # ignore_removed: a container removed (or still being created) between the list
            # and its inspect is skipped, not a NotFound that fails the whole reading.
            found = self.client.containers.list(
                all=True,
                filters={"label": [f"{MANAGED}=true", f"{SCOPE}={self.scope}"]},
                ignore_removed=True,
            )
            states = [self._state(c) for c in found if self._ours(c)]
        return sorted(states, key=lambda s: s.started_at or "", reverse=True)

    def current(self) -> EngineState | None:
        """The engine that runs now (adopted from Docker), else the latest that stopped."""
        states = self.engines()
        alive = [s for s in states if s.alive]
        return alive[0] if alive else states[0] if states else None

    def _our_container(self, container_id: str, action: str) -> Any | None:
        """The container when it exists and is ours, None when it is gone.

        Raises NotManaged for anyone else's: the one check every acting method goes through.
        """
        try:
            container = self.client.containers.get(container_id)
        except docker.errors.NotFound:
            return None
        if not self._ours(container):
            raise NotManaged(
                f"refusing to {action} {container.name}: it was not created by sparkdeck"
            )
        return container

    def inspect(self, container_id: str) -> EngineState:
        with daemon_errors():
            container = self._our_container(container_id, "inspect")
            if container is None:
                raise NotManaged(f"no container {container_id[:12]}")
            return self._state(container)

    def log_tail(self, container: Any, lines: int = LOG_TAIL_LINES) -> list[str]:
        """The last lines of stdout and stderr together, in the order they were written."""
        return [text for _, text in stamped_lines(container, lines)]

    def timed_logs(self, container_id: str) -> list[tuple[float, str]]:
        """Every log line with the time Docker received it (seconds since the epoch), for
        marking start-up phases; [] when the container is gone."""
        with daemon_errors():
            container = self._our_container(container_id, "read the logs of")
            if container is None:
                return []
            timed = [(docker_time(stamp), text) for stamp, text in stamped_lines(container, "all")]
        return [(when, text) for when, text in timed if when is not None]

    def host_pids(self, container_id: str) -> set[int]:
        """Host PIDs of the container's processes (to ask NVML about them after a stop)."""
        with daemon_errors():
            container = self._our_container(container_id, "list the processes of")
            if container is None or container.status != "running":
                return set()
            try:
                top = container.top(ps_args="-eo pid")
            except docker.errors.APIError:
                return set()
        column = top.get("Titles", []).index("PID") if "PID" in top.get("Titles", []) else 0
        return {int(row[column]) for row in top.get("Processes") or [] if row}

    def follow_logs(
        self, container_id: str, tail: int = LOG_TAIL_LINES, follow: bool = True
    ) -> Iterator[str]:
        """Yield the container's log lines (stdout and stderr), following new ones; a
        container that goes away ends the log (the one follower: runtime.logs)."""
        for batch in LogFollower(lambda: self, container_id, tail, follow).batches():
            yield from batch

    def published_ports(self, container_id: str) -> set[int]:
        """Host ports the container publishes (freed when it is stopped); empty if gone."""
        with daemon_errors():
            container = self._our_container(container_id, "inspect")
        if container is None:
            return set()
        bindings = container.attrs.get("HostConfig", {}).get("PortBindings") or {}
        return {
            int(b["HostPort"])
            for binds in bindings.values()
            for b in binds or []
            if str(b.get("HostPort") or "").isdigit()
        }

    def runtimes(self) -> set[str]:
        """The OCI runtimes the daemon offers (`docker info` Runtimes), e.g. runc, nvidia."""
        with daemon_errors():
            return set(self.client.info().get("Runtimes") or {})

    @property
    def local_daemon(self) -> bool:
        """Does the daemon run on this host (a Unix socket), so its files are ours to see?"""
        return str(self.client.api.base_url).startswith("http+docker://local")

    # ----- images --------------------------------------------------------------------------

    def image_present(self, image: str) -> bool:
        with daemon_errors():
            try:
                self.client.images.get(image)
                return True
            except docker.errors.ImageNotFound:
                return False

    def pull(self, image: str, on_progress: Callable[[PullProgress], object] | None = None) -> None:
        """Pull an image, reporting per-layer progress; ImagePullError says why it failed."""
        repository, tag = split_reference(image)
        try:
            with daemon_errors():
                for event in self.lifecycle.api.pull(repository, tag=tag, stream=True, decode=True):
                    if "error" in event:
                        raise ImagePullError(explain_pull_failure(str(event["error"]), image))
                    if on_progress is not None:
                        detail = event.get("progressDetail") or {}
                        on_progress(
                            PullProgress(
                                image,
                                event.get("id"),
                                str(event.get("status", "")),
                                detail.get("current"),
                                detail.get("total"),
                            )
                        )
        except docker.errors.APIError as exc:
            raise ImagePullError(explain_pull_failure(api_text(exc), image)) from exc

    # ----- lifecycle -----------------------------------------------------------------------

    def container_name(self, preset_id: str) -> str:
        suffix = "" if self.scope == "default" else f"-{self.scope}"
        return f"sparkdeck-{preset_id}{suffix}"

    def start(self, spec: ContainerSpec) -> EngineState:
        """Create and start the engine's container; on any failure nothing is left behind."""
        name = self.container_name(spec.preset_id)
        with daemon_errors():
            self._clear_name(name)
            kwargs = self._create_kwargs(spec, name)
            try:
                container = self.lifecycle.containers.create(**kwargs)
            except docker.errors.ImageNotFound as exc:
                raise LaunchError(f"image {spec.image} is not present: pull it first") from exc
            except docker.errors.APIError as exc:
                # A failed create leaves no container of ours. Whatever holds the name now
                # (a "name already in use" conflict) belongs to someone else - perhaps
                # another launch - and is left alone.
                if exc.status_code == 409:
                    raise LaunchError(
                        f"a container named {name} appeared while this launch "
                        "created its own (another launch?); it was left alone"
                    ) from exc
                raise LaunchError(self._explain(exc, spec)) from exc
            try:
                container.start()
                container.reload()
            except docker.errors.APIError as exc:
                self._remove_quietly(container.id)
                raise LaunchError(self._explain(exc, spec)) from exc
            except BaseException:
                self._remove_quietly(container.id)
                raise
        return self._state(container, with_logs=False)

    def _explain(self, exc: docker.errors.APIError, spec: ContainerSpec) -> str:
        return explain_start_failure(
            api_text(exc),
            spec.image,
            spec.port.host_ip,
            spec.port.host_port,
            spec.entrypoint or spec.command,
        )

    def _clear_name(self, name: str) -> None:
        """Remove a leftover of ours under `name` (crashed, or created and never started).

        The launch stopped every engine of this scope first, so a live container here was
        started meanwhile by someone else: it is refused, never removed.
        """
        try:
            existing = self.client.containers.get(name)
        except docker.errors.NotFound:
            return
        if not self._ours(existing):
            raise LaunchError(
                f"a container named {name} exists and was not created by "
                "sparkdeck: remove or rename it yourself"
            )
        if existing.status in ("running", "restarting", "paused"):
            raise LaunchError(
                f"a container named {name} is running (started by another "
                "launch?); it was left alone: stop it first"
            )
        self._remove_quietly(existing.id)

    def _remove_quietly(self, container_id: str) -> None:
        """Remove a container by id, only if it is ours (labels and scope): never by name,
        which another launch or another program may hold by now."""
        try:
            container = self._our_container(container_id, "remove")
            if container is not None:
                container.remove(force=True)
        except (docker.errors.DockerException, NotManaged):
            pass

    def _create_kwargs(self, spec: ContainerSpec, name: str) -> dict[str, Any]:
        folder = self.files_dir / self.container_name(spec.preset_id)
        return create_kwargs(spec, name, self.scope, folder)

    # poll the health endpoint until it answers 200, or the container stops first
    wait_ready = readiness.wait_ready

    def reload(self, container_id: str) -> EngineState:
        """The container's state now; EngineExited when it is gone."""
        with daemon_errors():
            try:
                container = self.client.containers.get(container_id)
            except docker.errors.NotFound:
                raise EngineExited("the container disappeared", None, []) from None
            return self._state(container)

    def tail(self, container_id: str) -> list[str]:
        """The container's last log lines; [] when it is gone."""
        with daemon_errors():
            try:
                return self.log_tail(self.client.containers.get(container_id))
            except docker.errors.NotFound:
                return []

    def wait_exit(self, container_id: str, timeout: float | None = None) -> EngineState:
        """Block until the container stops; return its final state with exit code and logs."""
        with daemon_errors():
            container = self._our_container(container_id, "wait for")
            if container is None:
                raise NotManaged(f"no container {container_id[:12]}")
            try:
                container.wait(timeout=timeout)
            except requests.exceptions.ReadTimeout:
                pass
            container.reload()
            return self._state(container)

    def stop(self, container_id: str, grace: float = 30.0) -> None:
        """SIGTERM, up to `grace` seconds, then SIGKILL; then remove. Only our own containers."""
        with daemon_errors():
            container = self._our_container(container_id, "stop")
            if container is None:
                return
            try:
                if container.status in ALIVE_STATES:
                    container.stop(timeout=int(max(grace, 0)))
                # deleting a large writable layer may rightly take longer than a read
                self.lifecycle.api.remove_container(container.id, force=True)
            except docker.errors.NotFound:
                pass
            shutil.rmtree(self.files_dir / container.name, ignore_errors=True)
