"""`sparkdeck logs` against a real container whose output is hostile (issue 12, items 5 and 9):
the engine's control bytes are shown, never obeyed, and `logs | head` ends without a
traceback. The CLI runs as a subprocess against the real Docker daemon and a busybox engine.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from collections.abc import Iterator

import pytest

from tests.conftest import busybox_preset, remove_scope

pytestmark = pytest.mark.docker
_OBEYED = re.compile(r"[\x00-\x08\x0b-\x1f\x7f]")
SCRIPT = (
    "printf 'boot \\033[2J\\033]0;pwned\\007 done\\n'; "
    "i=0; while [ $i -lt 2000 ]; do echo line $i; i=$((i+1)); done; "
    "exec httpd -f -p 8080 -h /www"
)


@pytest.fixture
def cli_env(isolated_dirs, scope, docker_client) -> Iterator[dict[str, str]]:
    yield {**os.environ, "SPARKDECK_SCOPE": scope}
    remove_scope(docker_client, scope)


def _cli(*args: str, env: dict[str, str], **kwargs: object) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "sparkdeck", *args],
        env=env,
        timeout=120,
        stdin=subprocess.DEVNULL,
        **kwargs,
    )


def test_logs_show_control_bytes_and_survive_a_closed_pipe(
    cli_env, isolated_dirs, busybox_image, tmp_path
):
    busybox_preset(isolated_dirs["config"], "hostile-log", busybox_image, SCRIPT)
    launched = _cli(
        "launch",
        "hostile-log",
        "--no-flush",
        "--timeout",
        "60",
        env=cli_env,
        capture_output=True,
        text=True,
    )
    assert launched.returncode == 0, launched.stderr

    logs = _cli("logs", "--tail", "5000", env=cli_env, capture_output=True, text=True)
    assert logs.returncode == 0, logs.stderr
    assert "boot ␛[2J␛]0;pwned␇ done" in logs.stdout
    assert not _OBEYED.search(logs.stdout)

    # `sparkdeck logs | head -0`: the reader is gone before the first line
    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        closed = _cli(
            "logs",
            "--tail",
            "5000",
            env=cli_env,
            stdout=write_end,
            stderr=subprocess.PIPE,
            text=True,
        )
    finally:
        os.close(write_end)
    assert "Traceback" not in closed.stderr and "BrokenPipe" not in closed.stderr, closed.stderr


def test_a_crashed_engines_last_lines_are_shown_not_obeyed(
    cli_env, isolated_dirs, busybox_image, docker_client, scope
):
    # ready (httpd answers), then the engine writes hostile bytes and dies
    script = "httpd -p 8080 -h /www; sleep 4; printf 'dying \\033[2J\\007 now\\n' >&2; exit 3"
    busybox_preset(isolated_dirs["config"], "hostile-crash", busybox_image, script)
    launched = _cli(
        "launch",
        "hostile-crash",
        "--no-flush",
        "--timeout",
        "60",
        env=cli_env,
        capture_output=True,
        text=True,
    )
    assert launched.returncode == 0, launched.stderr
    deadline = time.monotonic() + 60
    while True:
        status = _cli("status", env=cli_env, capture_output=True, text=True)
        if "CRASHED" in status.stdout or time.monotonic() > deadline:
            break
        time.sleep(1)
    assert "CRASHED (exit code 3)" in status.stdout, status.stdout
    assert "dying ␛[2J␇ now" in status.stdout and not _OBEYED.search(status.stdout)
