"""Theme files: the bundled ones load into Textual themes; bad files name file and key."""

from __future__ import annotations

from pathlib import Path

import pytest

from sparkdeck.config import paths
from sparkdeck.ui.themes import load_theme, load_themes


def test_bundled_themes_load():
    themes, problems = load_themes([paths.bundled_themes_dir()])
    assert problems == []
    assert {t.name for t in themes} >= {"spark-dark", "spark-light", "solarized-night"}
    dark = next(t for t in themes if t.name == "spark-dark")
    assert dark.primary == "#76B900" and dark.dark


def test_bad_theme_names_file_and_key(tmp_path: Path):
    bad = tmp_path / "bad.toml"
    bad.write_text('name = "x"\nprimary = "green"\nbogus = 1\n')
    with pytest.raises(ValueError) as info:
        load_theme(bad)
    text = str(info.value)
    assert f"{bad}: primary: 'green' is not a #RRGGBB colour" in text
    assert f"{bad}: bogus: unknown key" in text
    good = tmp_path / "good.toml"
    good.write_text('name = "mine"\nprimary = "#112233"\n')
    themes, problems = load_themes([tmp_path])
    assert [t.name for t in themes] == ["mine"] and len(problems) == 1
