"""Spark power rails from the community `spark_hwmon` kernel module, read from sysfs.

The module (antheas/spark_hwmon, see SPARK.md) registers hwmon devices named `spbm*` whose
channels are labelled `gpu`, `dc_input`, `syspl1` (with a cap) and `prereg`, each in
microwatts. Without the module there are no such devices: that is the normal case, and the
reader returns no rails rather than an error. Reading sysfs is a few small file reads, cheap
enough for a 1 Hz panel and never a spawned process.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

HWMON_ROOT = Path("/sys/class/hwmon")
DEVICE_PREFIX = "spbm"
_CHANNEL = re.compile(r"^power(\d+)_label$")


class HwmonError(OSError):
    """A spark_hwmon device exists but one of its channels could not be read."""


@dataclass(frozen=True)
class PowerRail:
    """One labelled power channel: watts now, and its cap where the module exposes one."""

    device: str  # the hwmon device's name, e.g. spbm0
    label: str  # gpu, dc_input, syspl1, prereg
    watts: float
    cap_watts: float | None = None


def _read_microwatts(path: Path) -> float:
    try:
        return int(path.read_text().strip()) / 1_000_000
    except (OSError, ValueError) as exc:
        raise HwmonError(f"cannot read {path}: {exc}") from exc


def _device_rails(directory: Path, device: str) -> list[PowerRail]:
    rails: list[PowerRail] = []
    for label_file in sorted(directory.glob("power*_label")):
        match = _CHANNEL.match(label_file.name)
        if match is None:
            continue
        channel = match.group(1)
        try:
            label = label_file.read_text().strip()
        except OSError as exc:
            raise HwmonError(f"cannot read {label_file}: {exc}") from exc
        watts = _read_microwatts(directory / f"power{channel}_input")
        cap_file = directory / f"power{channel}_cap"
        cap = _read_microwatts(cap_file) if cap_file.exists() else None
        rails.append(PowerRail(device, label, watts, cap))
    return rails


def read_spark_rails(root: Path = HWMON_ROOT) -> tuple[PowerRail, ...]:
    """Every rail of every `spbm*` hwmon device; () when the module is not loaded.

    Raises HwmonError when a device is there but a channel cannot be read (a half-read
    set of rails would look like a machine drawing less power than it does).
    """
    if not root.is_dir():
        return ()
    rails: list[PowerRail] = []
    for directory in sorted(root.iterdir()):
        try:
            name = (directory / "name").read_text().strip()
        except OSError:
            continue  # devices without a name file are not the module's
        if name.startswith(DEVICE_PREFIX):
            rails += _device_rails(directory, name)
    return tuple(rails)
