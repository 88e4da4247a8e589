"""The Docker side of an engine's life: pull, create and start, readiness, stop, adopt, logs.

Everything goes through the docker SDK and returns frozen snapshots (EngineState) or raises
the typed errors of sparkdeck.docker_errors. sparkdeck only ever stops or removes containers
that carry its `io.sparkdeck.managed` label in its own scope; anything else is left alone.
"""

from __future__ import annotations

import os
import shutil
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import docker
import docker.errors
import docker.types
import httpx
import requests.exceptions

from sparkdeck import paths
from sparkdeck.container_logs import split_lines, stamp_seconds, stamped_lines
from sparkdeck.container_spec import ContainerSpec
from sparkdeck.pull_progress import PullProgress, split_reference
from sparkdeck.engine_state import (
    ALIVE_STATES, HEALTH, KIND, MANAGED, METRICS, MODEL, PRESET, SCOPE, SPEC_HASH, URL,
    EngineState, container_labels, default_scope,
)
from sparkdeck.docker_errors import (
    DockerUnavailable, EngineExited, ImagePullError, LaunchError, NotManaged, ReadinessTimeout,
    explain_pull_failure, explain_start_failure, unavailable_message,
)

LOG_TAIL_LINES = 50
STACK_BYTES = 64 * 1024 * 1024  # NVIDIA's playbooks: --ulimit stack=67108864


@contextmanager
def _daemon() -> Iterator[None]:
    """Turn "cannot talk to the daemon" in any of its SDK shapes into DockerUnavailable."""
    try:
        yield
    except requests.exceptions.ConnectionError as exc:
        raise DockerUnavailable(unavailable_message(str(exc))) from exc
    except docker.errors.APIError:
        raise
    except docker.errors.DockerException as exc:
        raise DockerUnavailable(unavailable_message(str(exc))) from exc


def _api_text(exc: docker.errors.APIError) -> str:
    explanation = exc.explanation
    if isinstance(explanation, bytes):
        explanation = explanation.decode("utf-8", "replace")
    return str(explanation or exc)


class DockerRuntime:
    """sparkdeck's engine containers on one Docker daemon, within one scope."""

    def __init__(self, client: docker.DockerClient, scope: str | None = None,
                 files_dir: Path | None = None):
        self.client = client
        self.scope = scope or default_scope()
        self.files_dir = files_dir or paths.data_dir() / "launch-files"

    @classmethod
    def connect(cls, base_url: str | None = None, scope: str | None = None,
                timeout: int = 30) -> DockerRuntime:
        """Connect to the daemon (DOCKER_HOST or the default socket) and check it answers."""
        with _daemon():
            if base_url:
                client = docker.DockerClient(base_url=base_url, timeout=timeout)
            else:
                client = docker.from_env(timeout=timeout)
            client.ping()
        return cls(client, scope=scope)

    # ----- reading -------------------------------------------------------------------------

    def _ours(self, container: Any) -> bool:
        labels = container.labels or {}
        return labels.get(MANAGED) == "true" and labels.get(SCOPE) == self.scope

    def _state(self, container: Any, with_logs: bool | None = None) -> EngineState:
        labels = container.labels or {}
        state = container.attrs.get("State", {})
        docker_state = state.get("Status", container.status)
        exited = docker_state in ("exited", "dead")
        tail = self.log_tail(container) if (exited if with_logs is None else with_logs) else []
        return EngineState(
            container_id=container.id, name=container.name,
            preset_id=labels.get(PRESET, ""), kind=labels.get(KIND, ""),
            image=container.attrs.get("Config", {}).get("Image", ""),
            model=labels.get(MODEL, ""), base_url=labels.get(URL, ""),
            health_path=labels.get(HEALTH, "/health"), metrics_path=labels.get(METRICS) or None,
            spec_hash=labels.get(SPEC_HASH, ""), docker_state=docker_state,
            exit_code=state.get("ExitCode") if exited else None,
            started_at=state.get("StartedAt"), log_tail=tuple(tail),
            image_id=container.attrs.get("Image", ""),
            argv=tuple(str(a) for a in [container.attrs.get("Path") or "",
                                        *(container.attrs.get("Args") or [])] if a),
        )

    def engines(self) -> list[EngineState]:
        """Every container of this scope, alive or not, newest first."""
        with _daemon():
            found = self.client.containers.list(
                all=True, filters={"label": [f"{MANAGED}=true", f"{SCOPE}={self.scope}"]})
            states = [self._state(c) for c in found if self._ours(c)]
        return sorted(states, key=lambda s: s.started_at or "", reverse=True)

    def current(self) -> EngineState | None:
        """The engine that runs now (adopted from Docker), else the latest that stopped."""
        states = self.engines()
        alive = [s for s in states if s.alive]
        return (alive or states or [None])[0]

    def _our_container(self, container_id: str, action: str) -> Any | None:
        """The container when it exists and is ours, None when it is gone.

        Raises NotManaged for anyone else's: the one check every acting method goes through.
        """
        try:
            container = self.client.containers.get(container_id)
        except docker.errors.NotFound:
            return None
        if not self._ours(container):
            raise NotManaged(f"refusing to {action} {container.name}: it was not created by "
                             "sparkdeck")
        return container

    def inspect(self, container_id: str) -> EngineState:
        with _daemon():
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
        with _daemon():
            container = self._our_container(container_id, "read the logs of")
            if container is None:
                return []
            timed = [(stamp_seconds(stamp), text)
                     for stamp, text in stamped_lines(container, "all")]
        return [(when, text) for when, text in timed if when is not None]

    def host_pids(self, container_id: str) -> set[int]:
        """Host PIDs of the container's processes (to ask NVML about them after a stop)."""
        with _daemon():
            container = self._our_container(container_id, "list the processes of")
            if container is None or container.status != "running":
                return set()
            try:
                top = container.top(ps_args="-eo pid")
            except docker.errors.APIError:
                return set()
        column = top.get("Titles", []).index("PID") if "PID" in top.get("Titles", []) else 0
        return {int(row[column]) for row in top.get("Processes") or [] if row}

    def follow_logs(self, container_id: str, tail: int = LOG_TAIL_LINES,
                    follow: bool = True) -> Iterator[str]:
        """Yield the container's log lines (stdout and stderr), following new ones."""
        with _daemon():
            container = self.client.containers.get(container_id)
            stream = container.logs(stream=True, follow=follow, tail=tail)
        yield from split_lines(stream)

    # ----- images --------------------------------------------------------------------------

    def image_present(self, image: str) -> bool:
        with _daemon():
            try:
                self.client.images.get(image)
                return True
            except docker.errors.ImageNotFound:
                return False

    def pull(self, image: str, on_progress: Callable[[PullProgress], None] | None = None) -> None:
        """Pull an image, reporting per-layer progress; ImagePullError says why it failed."""
        repository, tag = split_reference(image)
        try:
            with _daemon():
                for event in self.client.api.pull(repository, tag=tag, stream=True, decode=True):
                    if "error" in event:
                        raise ImagePullError(explain_pull_failure(str(event["error"]), image))
                    if on_progress is not None:
                        detail = event.get("progressDetail") or {}
                        on_progress(PullProgress(image, event.get("id"),
                                                 str(event.get("status", "")),
                                                 detail.get("current"), detail.get("total")))
        except docker.errors.APIError as exc:
            raise ImagePullError(explain_pull_failure(_api_text(exc), image)) from exc

    # ----- lifecycle -----------------------------------------------------------------------

    def container_name(self, preset_id: str) -> str:
        suffix = "" if self.scope == "default" else f"-{self.scope}"
        return f"sparkdeck-{preset_id}{suffix}"

    def start(self, spec: ContainerSpec) -> EngineState:
        """Create and start the engine's container; on any failure nothing is left behind."""
        name = self.container_name(spec.preset_id)
        with _daemon():
            self._clear_name(name)
            kwargs = self._create_kwargs(spec, name)
            try:
                container = self.client.containers.create(**kwargs)
            except docker.errors.ImageNotFound as exc:
                raise LaunchError(f"image {spec.image} is not present: pull it first") from exc
            except docker.errors.APIError as exc:
                self._remove_quietly(name)
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
        return explain_start_failure(_api_text(exc), spec.image, spec.port.host_ip,
                                     spec.port.host_port, spec.entrypoint or spec.command)

    def _clear_name(self, name: str) -> None:
        try:
            existing = self.client.containers.get(name)
        except docker.errors.NotFound:
            return
        if not self._ours(existing):
            raise LaunchError(f"a container named {name} exists and was not created by "
                              "sparkdeck: remove or rename it yourself")
        existing.remove(force=True)

    def _remove_quietly(self, ref: str) -> None:
        try:
            self.client.containers.get(ref).remove(force=True)
        except docker.errors.DockerException:
            pass

    def _create_kwargs(self, spec: ContainerSpec, name: str) -> dict[str, Any]:
        mounts = []
        for m in spec.mounts:
            # A missing bind source is created as a directory (what `docker run -v` does);
            # an existing one, file or directory, is mounted as it is.
            if not m.volume and not Path(m.source).exists():
                Path(m.source).mkdir(parents=True, exist_ok=True)
            mounts.append(docker.types.Mount(m.target, m.source, read_only=m.read_only,
                                             type="volume" if m.volume else "bind"))
        if spec.files:
            folder = self.files_dir / self.container_name(spec.preset_id)
            for generated in spec.files:
                host_path = folder / Path(generated.container_path).name
                paths.atomic_write_text(host_path, generated.content, mode=0o644)
                mounts.append(docker.types.Mount(generated.container_path, str(host_path),
                                                 type="bind", read_only=True))
        environment = dict(spec.env)
        # Secrets come from sparkdeck's environment at this moment and go nowhere else.
        environment.update({k: os.environ[k] for k in spec.pass_env if k in os.environ})
        kwargs: dict[str, Any] = {
            "image": spec.image, "command": list(spec.command), "name": name,
            "labels": container_labels(spec, self.scope), "environment": environment,
            "ports": {f"{spec.port.container_port}/tcp": (spec.port.host_ip,
                                                          spec.port.host_port)},
            "mounts": mounts, "detach": True,
            "ulimits": [docker.types.Ulimit(name="memlock", soft=spec.memlock, hard=spec.memlock),
                        docker.types.Ulimit(name="stack", soft=STACK_BYTES, hard=STACK_BYTES)],
        }
        if spec.entrypoint is not None:
            kwargs["entrypoint"] = list(spec.entrypoint)
        if spec.gpus:
            kwargs["device_requests"] = [docker.types.DeviceRequest(count=-1,
                                                                    capabilities=[["gpu"]])]
        if spec.ipc_mode and spec.ipc_mode != "private":
            kwargs["ipc_mode"] = spec.ipc_mode
        if spec.shm_size:
            kwargs["shm_size"] = spec.shm_size
        return kwargs

    def wait_ready(self, state: EngineState, timeout: float, poll: float = 0.25,
                   cancel: threading.Event | None = None,
                   on_poll: Callable[[float], None] | None = None) -> EngineState:
        """Poll the health endpoint until it answers 200; raise if the container stops first.

        Any httpx.TransportError means "not ready yet": docker-proxy accepts connections
        before the engine listens, so early polls see resets rather than refusals.
        """
        url = state.base_url + state.health_path
        deadline = time.monotonic() + timeout
        started = time.monotonic()
        with httpx.Client(timeout=httpx.Timeout(3.0)) as http:
            while True:
                current = self._reload(state.container_id)
                if not current.alive:
                    code = current.exit_code
                    raise EngineExited(
                        f"{state.preset_id} stopped while starting (exit code {code})",
                        code, current.log_tail)
                try:
                    if http.get(url).status_code == 200:
                        return current
                except httpx.TransportError:
                    pass
                if on_poll is not None:
                    on_poll(time.monotonic() - started)
                if cancel is not None and cancel.is_set():
                    raise ReadinessTimeout(f"{state.preset_id}: launch cancelled",
                                           self._tail(state.container_id))
                if time.monotonic() >= deadline:
                    raise ReadinessTimeout(
                        f"{state.preset_id} did not answer {state.health_path} with 200 within "
                        f"{timeout:g} s", self._tail(state.container_id))
                time.sleep(poll)

    def _reload(self, container_id: str) -> EngineState:
        with _daemon():
            try:
                container = self.client.containers.get(container_id)
            except docker.errors.NotFound:
                raise EngineExited("the container disappeared", None, []) from None
            return self._state(container)

    def _tail(self, container_id: str) -> list[str]:
        with _daemon():
            try:
                return self.log_tail(self.client.containers.get(container_id))
            except docker.errors.NotFound:
                return []

    def wait_exit(self, container_id: str, timeout: float | None = None) -> EngineState:
        """Block until the container stops; return its final state with exit code and logs."""
        with _daemon():
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
        with _daemon():
            container = self._our_container(container_id, "stop")
            if container is None:
                return
            try:
                if container.status in ALIVE_STATES:
                    container.stop(timeout=int(max(grace, 0)))
                container.remove(force=True)
            except docker.errors.NotFound:
                pass
            shutil.rmtree(self.files_dir / container.name, ignore_errors=True)
