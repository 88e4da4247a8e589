"""What the long-running service holds while idle, in a real service process on real Docker.

The service runs for days; its idle size is a promise (issue 16: <= 45 MiB; the figure is
measured by benchmarks/service_cost.py). Most of it is libraries, so those it can do
without until they are needed are checked here, in the process the detached start and the
systemd unit run (`python -m sparkdeck.service`): aiohttp (`sparkdeck web`'s; the
endpoint's connection to the engine was aiohttp's client until 2026-12-04), httpx (the
metrics reader's, made with the first ready engine) and requests' character-set detector
(not loaded at all). With no detector, the docker SDK still reads Docker's answers and its
error messages.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

from tests.conftest import free_port

pytestmark = pytest.mark.docker

# runs the service's own entry in a process of its own; a thread looks at that process once
# the service has served its first second (telemetry, guard follower, Docker event stream)
PROBE = textwrap.dedent("""
    import json, os, runpy, signal, sys, threading, time
    from pathlib import Path

    def look():
        sock = Path(os.environ["SPARKDECK_RUNTIME_DIR"]) / "service.sock"
        deadline = time.monotonic() + 30
        while not sock.exists() and time.monotonic() < deadline:
            time.sleep(0.1)
        time.sleep(3)
        loaded = {name: name in sys.modules and sys.modules[name] is not None
                  for name in ("httpx", "httpcore", "aiohttp", "charset_normalizer",
                               "docker")}
        from sparkdeck.runtime import connect
        runtime = connect()
        try:  # the SDK's own call: its error text is read from Docker's answer
            runtime.client.containers.get("sparkdeck-no-such-container")
            error = ""
        except Exception as exc:
            error = f"{type(exc).__name__}: {exc}"
        print("PROBE " + json.dumps({"loaded": loaded, "error": error,
                                     "listed": isinstance(runtime.engines(), list)}),
              flush=True)
        os.kill(os.getpid(), signal.SIGTERM)

    threading.Thread(target=look, daemon=True).start()
    sys.argv = ["sparkdeck.service"]
    runpy.run_module("sparkdeck.service", run_name="__main__", alter_sys=True)
""")


def test_the_idle_service_holds_no_http_client_and_no_charset_detector(
    isolated_dirs, docker_client
):
    env = {**os.environ, "SPARKDECK_SERVICE": "auto", "SPARKDECK_ENDPOINT_PORT": str(free_port())}
    done = subprocess.run(
        [sys.executable, "-c", PROBE],
        capture_output=True,
        text=True,
        env=env,
        timeout=90,
        stdin=subprocess.DEVNULL,
    )
    lines = [line for line in done.stdout.splitlines() if line.startswith("PROBE ")]
    assert lines, (done.stdout, done.stderr)
    probe = json.loads(lines[0][len("PROBE ") :])
    assert "OpenAI endpoint on http://127.0.0.1:" in done.stderr  # the endpoint listens (the log)
    assert probe["loaded"] == {
        "httpx": False,
        "httpcore": False,
        "aiohttp": False,
        "charset_normalizer": False,
        "docker": True,
    }
    # the SDK still reads Docker's JSON and its error message without a detector
    assert probe["listed"] is True
    assert probe["error"].startswith("NotFound") and "No such container" in probe["error"]
    assert "character detection" not in done.stderr  # requests' warning stays quiet
    assert done.returncode == 0, done.stderr
