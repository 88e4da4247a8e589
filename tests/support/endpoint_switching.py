"""The service's OpenAI endpoint with two real llama-server presets to switch between (and
one that never fits), and what the switching tests read: the engine's own /metrics, the
request log, the running presets and the service's event stream.
"""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Callable, Iterator

import httpx
import openai
import pytest

from sparkdeck.runtime.state import PRESET
from tests.conftest import free_port, llama_preset_fields, scope_containers, write_preset
from tests.support.cli import run_cli, wait_for

RUNNING_MODEL = "/models/tiny.gguf"  # llama-server's model id: the -m path
FIXED = {"ignore_eos": True}  # llama.cpp's: the random tiny model may end a reply anywhere
HI = [{"role": "user", "content": "hello there"}]


def llama_metric(port: int, name: str) -> float:
    text = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=5).text
    match = re.search(rf"^{re.escape(name)} (\S+)$", text, re.M)
    assert match, f"{name} missing from /metrics"
    return float(match.group(1))


def running_presets(docker_client, scope: str) -> list[str]:
    return sorted(
        c.labels.get(PRESET, "?")
        for c in scope_containers(docker_client, scope)
        if c.status == "running"
    )


@pytest.fixture
def switching(
    service_env, isolated_dirs, llama_image, docker_client, scope
) -> Iterator[Callable[..., dict]]:
    """Start the service with [endpoint] settings, presets sw-a (launched) and sw-b (not),
    and a sw-huge whose stated claim (4000 GiB) can never fit. No hold after a switch
    (min_hold_s = 0) unless a test asks for one: these tests time the switch itself.
    A module using it imports tests.support.service_env's `service_env` fixture too."""

    def start(**endpoint: object) -> dict:
        env = {**service_env, "SPARKDECK_ENDPOINT_PORT": str(free_port())}
        config = isolated_dirs["config"]
        config.mkdir(parents=True, exist_ok=True)
        lines = [
            f"{k} = {json.dumps(v)}"
            for k, v in {
                "switch_on_request": True,
                "switch_flush": False,
                "min_hold_s": 0.0,
                **endpoint,
            }.items()
        ]
        (config / "settings.toml").write_text("[endpoint]\n" + "\n".join(lines) + "\n")
        ports = {"sw-a": free_port(), "sw-b": free_port()}
        for preset_id, port in ports.items():
            write_preset(config / "presets", preset_id, **llama_preset_fields(llama_image, port))
        write_preset(
            config / "presets",
            "sw-huge",
            **llama_preset_fields(
                llama_image,
                free_port(),
                llamacpp={
                    "context": 2048,
                    "gpu_layers": 0,
                    "parallel": 2,
                    "memory_gib": 4000.0,
                    "no_mmap_flag": ["--load-mode", "none"],
                },
            ),
        )
        launched = run_cli("launch", "sw-a", "--no-flush", "--timeout", "60", env=env)
        assert launched.returncode == 0, launched.stderr
        base = f"http://127.0.0.1:{env['SPARKDECK_ENDPOINT_PORT']}/v1"

        def serving() -> bool:
            try:
                listed = httpx.get(base + "/models", timeout=5).json()["data"]
            except (httpx.HTTPError, ValueError, KeyError):
                return False
            return any(m.get("running") and m.get("preset") == "sw-a" for m in listed)

        wait_for(serving, timeout=30, what="the endpoint serving sw-a", every=0.3)
        return {
            "base": base,
            "env": env,
            "ports": ports,
            "data": isolated_dirs["data"],
            "client": openai.OpenAI(base_url=base, api_key="unused", max_retries=0, timeout=120),
        }

    yield start
    assert docker_client.ping()


def log_rows(data) -> list[dict]:
    log = data / "requests.jsonl"
    return [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []


class ServiceEvents:
    """The service's event stream, read in a thread: (kind, data) with the hub's wall
    clock `at`, for the figures the service itself gives (a launch's start and result)."""

    def __init__(self, env: dict[str, str]) -> None:
        from tests.support.service_env import client_for

        self.seen: list[tuple[str, dict]] = []
        self._client = client_for(env)
        self._ready = threading.Event()
        threading.Thread(target=self._read, daemon=True).start()
        assert self._ready.wait(10), "the service's event stream did not open"

    def _read(self) -> None:
        try:
            with self._client.events(read_timeout=None) as pairs:
                for kind, data in pairs:
                    self._ready.set()
                    self.seen.append((kind, data))
        except Exception:  # noqa: BLE001 - close() ends the stream under the reader
            pass

    def launches(self) -> list[dict]:
        """Each launch the service ran: preset, began (its first event) and ended (its
        result), wall clock, and whether it succeeded."""
        began: dict[int, float] = {}
        for kind, data in self.seen:  # `launch` lines once, `launch-event` values now
            if kind != "launch-result" and isinstance(data.get("launch"), int):
                began.setdefault(data["launch"], data["at"])
        return [
            {"preset": d["preset"], "began": began[d["launch"]], "ended": d["at"], "ok": d["ok"]}
            for k, d in self.seen
            if k == "launch-result" and d["launch"] in began
        ]

    def endpoint_switches(self) -> list[dict]:
        """Each switch the endpoint ran, as it published it: preset, took_s (its plan to
        the new engine reached), ok."""
        return [data for kind, data in self.seen if kind == "endpoint-switch"]

    def kinds(self) -> list[str]:
        return sorted({kind for kind, _ in self.seen})

    def close(self) -> None:
        self._client.close()
