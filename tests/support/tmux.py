"""tmux for the tests that run sparkdeck as a user runs it, in a real terminal."""

from __future__ import annotations

import shutil
import subprocess

from tests.conftest import unavailable


def require_tmux() -> None:
    if shutil.which("tmux") is None:  # .ci/run installs it: a missing tmux fails there
        unavailable("tmux is not installed (apt-get install tmux)")


def tmux(*args: str) -> str:
    return subprocess.run(["tmux", *args], capture_output=True, text=True, check=True).stdout
