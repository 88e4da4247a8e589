"""The service's socket and API contract, on a real service process (no engine needed).

Its socket refuses any other user (a client forked and switched to `nobody`); a front end of
another API version gets a clear message; one service per user; `service install` writes a
unit that runs this Python's sparkdeck.
"""

from __future__ import annotations

import configparser
import json
import os
import shlex
import socket
import stat
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from sparkdeck.service.client import ServiceClient, ServiceVersionMismatch
from sparkdeck.service.location import API_VERSION
from tests.conftest import unavailable
from tests.support.cli import run_cli
from tests.support.service_teardown import Pinned, stop_service

NOBODY = 65534


@pytest.fixture
def service(isolated_dirs) -> Iterator[tuple[dict[str, str], Path]]:
    env = {**os.environ, "SPARKDECK_SERVICE": "auto"}
    started = run_cli("service", "start", env=env)
    assert started.returncode == 0, started.stderr
    service = Pinned(int(started.stdout.split("process ")[1].rstrip(")\n")))
    yield env, isolated_dirs["runtime"] / "service.sock"
    stopped = stop_service(env, service)
    assert stopped.returncode == 0 and "stopped the sparkdeck service" in stopped.stdout


def test_the_socket_is_private_and_refuses_another_user(service):
    _env, path = service
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    if os.getuid() != 0:
        unavailable("root, to switch a client to another user (CI runs as root)")
    read, write = os.pipe()
    child = os.fork()
    if child == 0:  # the other user: no exec needed, just a raw connect
        os.close(read)
        try:
            os.setgroups([])
            os.setgid(NOBODY)
            os.setuid(NOBODY)
            with socket.socket(socket.AF_UNIX) as sock:
                sock.connect(str(path))
            os.write(write, b"connected")
        except OSError as exc:
            os.write(write, f"refused {exc.errno}".encode())
        finally:
            os._exit(0)
    os.close(write)
    os.waitpid(child, 0)
    answer = os.read(read, 100).decode()
    os.close(read)
    assert answer.startswith("refused") and answer.split()[1] in {"13", "1"}, answer  # EACCES
    # and the owner connects fine
    with ServiceClient(path) as client:
        assert client.status()["api_version"] == API_VERSION


def test_another_api_version_gets_a_clear_message(service):
    _env, path = service
    transport = httpx.HTTPTransport(uds=str(path))
    v, newer_v = API_VERSION, API_VERSION + 1
    with httpx.Client(transport=transport, base_url="http://sparkdeck") as http:
        newer = http.get(f"/v{v}/status", headers={"X-Sparkdeck-Api": str(newer_v)})
        assert newer.status_code == 409
        assert f"speaks API v{v}, the front end v{newer_v}" in newer.json()["error"]
        assert "sparkdeck service stop" in newer.json()["error"]
        unknown = http.get(f"/v{newer_v}/status")
        assert unknown.status_code == 404 and f"speaks API v{v}" in unknown.json()["error"]
        assert unknown.headers["X-Sparkdeck-Api"] == str(v)
    # a client of another version reading this service's answers: a typed, clear error
    client = ServiceClient(path)
    client._http.headers["X-Sparkdeck-Api"] = str(v)
    import sparkdeck.service.client as module

    original = module.API_VERSION
    module.API_VERSION = newer_v
    try:
        with pytest.raises(
            ServiceVersionMismatch, match=f"speaks API v{v}, this sparkdeck v{newer_v}"
        ):
            client._check(client._http.get(f"/v{v}/status"))
    finally:
        module.API_VERSION = original
        client.close()


def test_one_service_per_user(service):
    env, _path = service
    second = run_cli("service", "run", env=env, timeout=30)
    assert second.returncode == 1
    assert "the service already runs (process" in second.stderr
    status = run_cli("service", "status", "--json", env=env)
    assert json.loads(status.stdout)["running"] is True


def test_install_writes_a_unit_that_runs_this_sparkdeck(isolated_dirs, tmp_path):
    env = {**os.environ, "XDG_CONFIG_HOME": str(tmp_path / "xdg")}
    installed = run_cli("service", "install", env=env)
    assert installed.returncode == 0, installed.stderr
    unit_path = tmp_path / "xdg" / "systemd" / "user" / "sparkdeck.service"
    assert f"wrote {unit_path}" in installed.stdout
    assert "systemctl --user enable --now sparkdeck.service" in installed.stdout
    assert "loginctl enable-linger" in installed.stdout
    unit = configparser.ConfigParser(strict=False, interpolation=None)
    unit.optionxform = str
    unit.read_string(unit_path.read_text())
    argv = shlex.split(unit["Service"]["ExecStart"])
    assert argv == [sys.executable, "-m", "sparkdeck.service"]
    # the test's own data dir travels into the unit (sparkdeck keeps its files where asked)
    assert f"SPARKDECK_DATA_DIR={isolated_dirs['data']}" in unit_path.read_text()
    assert unit["Install"]["WantedBy"] == "default.target"
    assert "HF_TOKEN" not in unit_path.read_text()  # secrets never land in files


def test_a_clean_stop_is_not_taken_for_a_crash(isolated_dirs):
    """`sparkdeck service stop` (SIGTERM) ends the service through its own clean-up: the
    flight recorder's clean-stop mark is written, so the next start reports no crash. (uvicorn
    re-raises SIGTERM after its shutdown, which used to end the process before that.)"""
    env = {**os.environ, "SPARKDECK_SERVICE": "auto"}
    for _ in range(2):
        assert run_cli("service", "start", env=env).returncode == 0
        time.sleep(4)  # rows committed (every 3 s)
        status = json.loads(run_cli("service", "status", "--json", env=env).stdout)
        assert status["postmortem"] is None, status["postmortem"]
        stopped = run_cli("service", "stop", env=env)
        assert stopped.returncode == 0, stopped.stderr
    log = (isolated_dirs["data"] / "service.log").read_text()
    assert log.count("sparkdeck service stopped") == 2
