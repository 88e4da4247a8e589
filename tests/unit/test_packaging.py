"""The wheel carries the presets, themes and stylesheet; the installed copy finds them."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_wheel_ships_presets_themes_and_stylesheet(tmp_path):
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "-q",
            "--no-deps",
            "--no-build-isolation",
            "-w",
            str(tmp_path),
            str(ROOT),
        ],
        check=True,
        capture_output=True,
        timeout=300,
    )
    (wheel,) = tmp_path.glob("sparkdeck-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    for preset in (ROOT / "presets").glob("*.toml"):
        assert f"sparkdeck/_bundled/presets/{preset.name}" in names
    for theme in (ROOT / "themes").glob("*.toml"):
        assert f"sparkdeck/_bundled/themes/{theme.name}" in names
    assert "sparkdeck/ui/sparkdeck.tcss" in names
    entry_points = next(n for n in names if n.endswith("entry_points.txt"))
    assert (
        "sparkdeck = sparkdeck.__main__:main" in zipfile.ZipFile(wheel).read(entry_points).decode()
    )
