"""`sparkdeck service install`: a systemd unit that keeps the service running.

A user unit by default (~/.config/systemd/user; it runs while the user has a session, or
always with `loginctl enable-linger`); `--system` writes a system unit for root-owned setups
(/etc/systemd/system, running as the user who installs it). The unit runs this Python's
`-m sparkdeck.service` (location.service_argv), so it keeps working from a venv. Written
atomically; the user is told how to enable it: sparkdeck does not enable services itself.
"""

from __future__ import annotations

import getpass
import os
import shlex
from dataclasses import dataclass
from pathlib import Path

from sparkdeck.config.paths import atomic_write_text
from sparkdeck.service import location

UNIT_NAME = "sparkdeck.service"
# environment that changes where sparkdeck keeps its files: carried into the unit as set now
CARRIED_ENV = (
    "SPARKDECK_CONFIG_DIR",
    "SPARKDECK_DATA_DIR",
    "SPARKDECK_RUNTIME_DIR",
    "DOCKER_HOST",
    "HF_HOME",
    "HF_HUB_CACHE",
)


@dataclass(frozen=True)
class Installed:
    path: Path
    enable: tuple[str, ...]  # the commands the user runs to enable and start it
    note: str


def unit_text(system: bool) -> str:
    argv = location.service_argv()
    lines = [
        "[Unit]",
        "Description=sparkdeck: the engine's owner and memory guard",
        "After=docker.service" if system else "After=default.target",
        "",
        "[Service]",
        "Type=simple",
        f"ExecStart={shlex.join(argv)}",
        # a failed start is retried; a clean stop (systemctl stop) is left stopped
        "Restart=on-failure",
        "RestartSec=2",
        # the guard must not be the process the kernel picks when memory runs out
        "OOMScoreAdjust=-500",
    ]
    if system:
        lines.append(f"User={getpass.getuser()}")
    for name in CARRIED_ENV:
        if os.environ.get(name):
            lines.append(f"Environment={shlex.quote(f'{name}={os.environ[name]}')}")
    lines += [
        "",
        "[Install]",
        "WantedBy=multi-user.target" if system else "WantedBy=default.target",
        "",
    ]
    return "\n".join(lines)


def install(system: bool, root: Path | None = None) -> Installed:
    """Write the unit (under `root` instead of / and ~ when given: tests)."""
    if system:
        path = (root or Path("/")) / "etc/systemd/system" / UNIT_NAME
        enable: tuple[str, ...] = ("systemctl daemon-reload", f"systemctl enable --now {UNIT_NAME}")
        note = "a system unit: it starts at boot, before anyone logs in"
    else:
        config = Path(os.environ.get("XDG_CONFIG_HOME") or Path.home() / ".config")
        path = (root / "user-config" if root else config) / "systemd/user" / UNIT_NAME
        enable = (
            "systemctl --user daemon-reload",
            f"systemctl --user enable --now {UNIT_NAME}",
            f"loginctl enable-linger {getpass.getuser()}",
        )
        note = (
            "a user unit: with linger enabled (the last command) it runs without a login "
            "session, so the guard keeps watching after you log out"
        )
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(path, unit_text(system), mode=0o644)
    return Installed(path, enable, note)
