"""The sparkdeck service's environment for a test (its own scope, the service started on
demand) and its clean-up, the client of its socket, and the tiny llama-server preset the
service tests launch.
"""

from __future__ import annotations

import json
import os
import signal
import threading
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from sparkdeck.service.client import ServiceClient
from tests.conftest import (
    free_port,
    llama_preset_fields,
    remove_scope,
    write_preset,
)
from tests.support.cli import run_cli
from tests.support.service_teardown import Pinned, stop_service


def service_pid(env: dict[str, str]) -> int | None:
    status = run_cli("service", "status", "--json", env=env, timeout=30)
    report = json.loads(status.stdout)
    return report["pid"] if report["running"] else None


@pytest.fixture
def service_env(isolated_dirs, scope, docker_client) -> Iterator[dict[str, str]]:
    env = {**os.environ, "SPARKDECK_SCOPE": scope, "SPARKDECK_SERVICE": "auto"}
    yield env
    # whoever holds the service lock, answering or not (a test that failed with the service
    # stopped or wedged must not leave it behind): asked of the lock, not of the service
    from sparkdeck.service.liveness import lock_holder

    pid = lock_holder()
    if pid is not None:
        service = Pinned(pid)
        service.signal(signal.SIGCONT)
        stop_service(env, service)  # and SIGKILLed if it did not stop
    remove_scope(docker_client, scope)


def client_for(env: dict[str, str]) -> ServiceClient:
    return ServiceClient(Path(env["SPARKDECK_RUNTIME_DIR"]) / "service.sock")


def tiny_preset(isolated_dirs, image: str, preset_id: str = "svc-tiny") -> int:
    port = free_port()
    write_preset(isolated_dirs["config"] / "presets", preset_id, **llama_preset_fields(image, port))
    return port


def follow_service(env: dict[str, str], seen: list, done: threading.Event) -> threading.Thread:
    """A second client of the service, recording every event it sends (until `done`)."""
    live = threading.Event()

    def run() -> None:
        try:
            with client_for(env) as client, client.events() as events:
                for kind, data in events:
                    seen.append((kind, data))
                    live.set()
                    if done.is_set():
                        return
        except httpx.HTTPError:
            if not done.is_set():  # the service went away while the test still ran
                raise

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    assert live.wait(10), "the service's event stream did not start"
    return thread
