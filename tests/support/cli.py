"""The test kit's one way to run the `sparkdeck` command and to wait for something outside
the test's own process (a service, a container, a file).

`run_cli` runs this Python's sparkdeck as a user would (its own process, stdin closed, output
captured as text) with the test's environment unless one is given: the isolated dirs that
conftest's autouse fixture sets are then the command's too. Waiting inside a Textual app is
tests.support.pane_host.wait_until's (it lets the app run between looks).
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TypeVar

T = TypeVar("T")


def cli(*args: str) -> list[str]:
    """The argv of `sparkdeck ARGS` with the Python running the tests."""
    return [sys.executable, "-m", "sparkdeck", *args]


def run_cli(
    *args: str, env: Mapping[str, str] | None = None, timeout: float = 120, cwd: Path | None = None
) -> subprocess.CompletedProcess[str]:
    """`sparkdeck ARGS`, finished (subprocess.TimeoutExpired after `timeout` s)."""
    return subprocess.run(
        cli(*args),
        capture_output=True,
        text=True,
        env=dict(env) if env is not None else os.environ.copy(),
        timeout=timeout,
        stdin=subprocess.DEVNULL,
        cwd=cwd,
    )


def wait_for(
    predicate: Callable[[], T], timeout: float, what: str | Callable[[], str], every: float = 0.1
) -> T:
    """predicate()'s first true value, asked every `every` s; AssertionError after `timeout`
    s naming `what` (or what it returns then: the state seen instead)."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() >= deadline:
            said = what() if callable(what) else what
            raise AssertionError(f"timed out after {timeout} s waiting for {said}")
        time.sleep(every)


def sparkdeck(*args: str, env_dirs: dict[str, Path], **popen: object):
    env = {
        **os.environ,
        "SPARKDECK_DATA_DIR": str(env_dirs["data"]),
        "SPARKDECK_CONFIG_DIR": str(env_dirs["config"]),
        "SPARKDECK_SCOPE": "t" + uuid.uuid4().hex[:10],
    }  # never sees anyone's engine
    command = [sys.executable, "-m", "sparkdeck", *args]
    if popen.pop("background", False):
        return subprocess.Popen(
            command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, **popen
        )
    return subprocess.run(command, capture_output=True, text=True, timeout=240, env=env)
