"""Busybox "engines" for the guard's and the launch's Docker tests: one that never gets
healthy, one healthy at once, and one that holds memory in its /dev/shm.
"""

from __future__ import annotations

from pathlib import Path

from tests.conftest import busybox_preset

MIB = 2**20


def sleeper(tmp_path: Path, busybox_image: str, preset_id: str = "sleeper", **openai):
    """A busybox "engine" that never answers its health path (a long start-up)."""
    return busybox_preset(
        tmp_path,
        preset_id,
        busybox_image,
        "echo loading; sleep 600",
        health_path="/health",
        openai=openai,
        startup_timeout=60.0,
    )


def web(tmp_path: Path, busybox_image: str, preset_id: str = "web"):
    """A busybox "engine" that answers its health path at once (busybox httpd)."""
    return busybox_preset(
        tmp_path, preset_id, busybox_image, "exec httpd -f -p 8080 -h /www", startup_timeout=30.0
    )


def holder(tmp_path: Path, image: str, mib: int, preset_id: str = "holder"):
    """A busybox engine that holds `mib` MiB in its /dev/shm, then serves its health page."""
    script = f"head -c {mib * MIB} /dev/zero > /dev/shm/hold && exec httpd -f -p 8080 -h /www"
    return busybox_preset(tmp_path, preset_id, image, script, startup_timeout=60.0)
