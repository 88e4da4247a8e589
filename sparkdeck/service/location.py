"""Where the service listens and how front ends find it.

The socket lives in the user's runtime dir ($XDG_RUNTIME_DIR/sparkdeck, else
/run/user/UID/sparkdeck), in a folder of mode 0700, and is itself 0600: the kernel refuses
a connect() from any other user (root aside), so no request reaches the service from one.
SPARKDECK_RUNTIME_DIR overrides the folder (tests; a system-wide setup). SPARKDECK_SERVICE
says whether front ends use and start the service: "auto" (default) or "off" (the launch
runs in the calling process, as before the service existed; the tests of the launch
sequence itself use it).
"""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path

from sparkdeck.config import paths

# 2: launch events cross the socket as typed values (`launch-event`), not printed lines
API_VERSION = 2
# A Unix socket path must fit in sockaddr_un (108 bytes with its NUL on Linux).
MAX_SOCKET_PATH = 107


def runtime_dir() -> Path:
    """Where the socket's folder goes. Chosen here, not by platformdirs, which warns
    (RuntimeDirWarning, on every command) when XDG_RUNTIME_DIR is unset: ssh without
    logind, sudo, cron and containers all do that, and nothing is wrong."""
    override = os.environ.get("SPARKDECK_RUNTIME_DIR")
    if override:
        return Path(override)
    xdg = os.environ.get("XDG_RUNTIME_DIR", "")
    if os.path.isabs(xdg) and Path(xdg).is_dir():
        return Path(xdg) / paths.APP_NAME
    # the login session's folder, for a shell that lost the variable (sudo, cron)
    session = Path(f"/run/user/{os.getuid()}")
    if session.is_dir():
        return session / paths.APP_NAME
    # root on a box without a login session has no /run/user/0: a private folder under
    # the system's temp dir rather than inventing /run/user ourselves
    return Path(tempfile.gettempdir()) / f"sparkdeck-{os.getuid()}"


def socket_path() -> Path:
    path = runtime_dir() / "service.sock"
    if len(os.fsencode(path)) > MAX_SOCKET_PATH:
        raise ValueError(
            f"the service socket path {path} is longer than a Unix socket "
            f"allows ({MAX_SOCKET_PATH} bytes): set SPARKDECK_RUNTIME_DIR to a "
            "shorter folder"
        )
    return path


def service_argv() -> list[str]:
    """How the service process is started (detached by a front end, or by its systemd unit):
    this Python, so it works from a venv, and the service package's own entry point rather
    than the whole CLI, so the long-running process holds only what it uses (~5 MiB less)."""
    return [sys.executable, "-m", "sparkdeck.service"]


def log_path() -> Path:
    """Where a detached service writes what it prints (its own log, in the data dir)."""
    return paths.data_dir() / "service.log"


def enabled() -> bool:
    return os.environ.get("SPARKDECK_SERVICE", "auto").strip().lower() != "off"


def ensure_private_dir(path: Path) -> Path:
    """Create `path` 0700 and refuse one that another user owns or others can enter."""
    path.mkdir(mode=0o700, parents=True, exist_ok=True)
    info = path.stat()
    if info.st_uid != os.getuid():
        raise PermissionError(
            f"{path} belongs to another user (uid {info.st_uid}); the "
            "service will not put its socket there"
        )
    if info.st_mode & 0o077:
        os.chmod(path, 0o700)
    return path
