"""Where sparkdeck reads and writes files.

User files live in the platformdirs config and data dirs; SPARKDECK_CONFIG_DIR and
SPARKDECK_DATA_DIR override them so tests (and users with unusual setups) never touch the
default locations. Bundled presets and themes ship inside the wheel under `_bundled/`; in a
source checkout they are read from the repo top level.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import platformdirs

APP_NAME = "sparkdeck"
_PACKAGE_DIR = Path(__file__).resolve().parent


def config_dir() -> Path:
    """Directory for settings.toml and the user's presets/ and themes/."""
    override = os.environ.get("SPARKDECK_CONFIG_DIR")
    return Path(override) if override else Path(platformdirs.user_config_dir(APP_NAME))


def data_dir() -> Path:
    """Directory for state sparkdeck writes: attached engines, launch files, records."""
    override = os.environ.get("SPARKDECK_DATA_DIR")
    return Path(override) if override else Path(platformdirs.user_data_dir(APP_NAME))


def _bundled(name: str) -> Path:
    installed = _PACKAGE_DIR / "_bundled" / name
    if installed.is_dir():
        return installed
    return _PACKAGE_DIR.parent / name  # source checkout / editable install


def bundled_presets_dir() -> Path:
    return _bundled("presets")


def bundled_themes_dir() -> Path:
    return _bundled("themes")


def user_presets_dir() -> Path:
    return config_dir() / "presets"


def user_themes_dir() -> Path:
    return config_dir() / "themes"


def atomic_write_text(path: Path, text: str, mode: int = 0o600) -> None:
    """Write a file so that readers see either the old or the new content, never half.

    The temporary file sits in the same directory so the final rename stays on one filesystem.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise
