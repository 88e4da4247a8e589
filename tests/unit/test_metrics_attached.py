"""Metrics of an attached engine: `sparkdeck metrics` and the TUI's metrics tab.

`chat` and `bench` already talk to the one engine attached with `sparkdeck attach`; `metrics`
refused without --endpoint and the metrics tab waited forever for a first reading. Here a
real HTTP server on loopback plays the attached engine (vLLM-named series on /metrics, 200 on
/health), with no sparkdeck engine and no Docker daemon; an attached engine of a kind without
a metrics endpoint is named as such, in the CLI and on the tab, instead of waited for.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from sparkdeck.endpoints import AttachedRegistry, Endpoint
from tests.support.metrics_loopback import serving
from tests.support.offline_app import make_app, text_of
from tests.support.pane_host import wait_until

BODY = (
    b"# HELP vllm:num_requests_running Requests running.\n"
    b"# TYPE vllm:num_requests_running gauge\n"
    b'vllm:num_requests_running{model_name="m"} 3.0\n'
)


def _respond(path: str) -> tuple[int, bytes]:
    return {
        "/metrics": (200, BODY),
        "/health": (200, b""),
        "/v1/models": (200, b'{"data": [{"id": "m"}]}'),
    }.get(path, (404, b"no"))


def _attach(name: str, url: str, kind: str) -> None:
    engine_paths = {"vllm": ("/health", "/metrics"), "openai": ("/v1/models", None)}[kind]
    AttachedRegistry().add(Endpoint(name, url, kind, *engine_paths, "attached"))


def _metrics(*args: str) -> subprocess.CompletedProcess:
    # no Docker daemon: an attached engine needs none
    env = {**os.environ, "DOCKER_HOST": "unix:///nonexistent/docker.sock"}
    return subprocess.run(
        [sys.executable, "-m", "sparkdeck", "metrics", *args],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
        stdin=subprocess.DEVNULL,
    )


def test_cli_reads_the_one_attached_engine():
    with serving(_respond) as url:
        _attach("atlas", url, "vllm")
        done = _metrics("--json", "--samples", "2", "--interval", "0.3")
    assert done.returncode == 0, done.stderr
    readings = [json.loads(line) for line in done.stdout.splitlines()]
    assert [r["status"] for r in readings] == ["ok", "ok"]
    assert readings[-1]["running"] == 3.0


def test_cli_names_an_attached_engine_without_metrics():
    with serving(_respond) as url:
        _attach("plain", url, "openai")
        done = _metrics("--samples", "1")
    assert done.returncode != 0
    assert "no metrics endpoint" in done.stderr and "Traceback" not in done.stderr


@pytest.mark.anyio
async def test_metrics_tab_reads_the_attached_engine_without_docker(tmp_path: Path) -> None:
    with serving(_respond) as url:
        _attach("atlas", url, "vllm")
        app, _ = make_app(tmp_path, engine_poll_seconds=0.5)

        async def scenario() -> None:
            async with app.run_test(size=(120, 40)) as pilot:
                await pilot.press("e")
                await wait_until(
                    pilot,
                    lambda: bool(app.metrics_tab.trail) and app.metrics_tab.trail[-1].ok,
                    timeout=15.0,
                    what="a reading of the attached engine",
                )
                await wait_until(
                    pilot,
                    lambda: "running" in text_of(app.query_one("#metrics-queue")),
                    timeout=5.0,
                    what="the queue line",
                )
                assert "3 running" in text_of(app.query_one("#metrics-queue"))

        await scenario()


@pytest.mark.anyio
async def test_metrics_tab_says_an_attached_engine_has_no_metrics(tmp_path: Path) -> None:
    with serving(_respond) as url:
        _attach("plain", url, "openai")
        app, _ = make_app(tmp_path, engine_poll_seconds=0.5)

        async def scenario() -> None:
            async with app.run_test(size=(120, 40)) as pilot:
                await pilot.press("e")
                rates = app.query_one("#metrics-rates")
                await wait_until(
                    pilot,
                    lambda: "no metrics to read" in text_of(rates),
                    timeout=15.0,
                    what="the tab to say there are no metrics",
                )
                assert "waiting" not in text_of(rates)

        await scenario()
