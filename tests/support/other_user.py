"""Running a probe as a second Unix user, made here: what another local user can reach.

The probe is a Python source string run with `python3 -c` (the other user may not be able
to read the checkout or the project's venv), so it may import only the standard library. Its
stdout is returned; a machine where no user can be made (not root, no useradd) or where that
user can run no Python is `unavailable` (a failure when every real part is required).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

from tests.conftest import unavailable

USER = "sdwebprobe"


def _ensure_user() -> str:
    if os.geteuid() != 0 or shutil.which("useradd") is None:
        unavailable("creating a second Unix user needs root and useradd")
    if subprocess.run(["id", USER], capture_output=True).returncode != 0:
        subprocess.run(
            ["useradd", "--system", "--no-create-home", "--shell", "/usr/sbin/nologin", USER],
            check=True,
            capture_output=True,
        )
    return USER


def _runnable(python: str, user: str) -> bool:
    try:
        return (
            subprocess.run(
                [python, "-c", "pass"], user=user, cwd="/", capture_output=True
            ).returncode
            == 0
        )
    except OSError:  # a venv under a folder that user may not enter
        return False


def run_as_other_user(source: str, *args: str, timeout: float = 60) -> str:
    """Run `source` as the second user; its stdout (a failure raises with its stderr)."""
    user = _ensure_user()
    python = next(
        (
            p
            for p in (sys.executable, getattr(sys, "_base_executable", ""), "/usr/bin/python3")
            if p and _runnable(p, user)
        ),
        None,
    )
    if python is None:
        unavailable(f"no Python interpreter that the user {user} may run")
    done = subprocess.run(
        [python, "-c", source, *args],
        user=user,
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd="/",
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def uid_of_other_user() -> int:
    import pwd

    return pwd.getpwnam(_ensure_user()).pw_uid
