"""The preset catalog: the presets read from the bundled and the user's preset dirs, and
the problems found in their files, as one value.

Kept apart from sparkdeck.presets, the files' reader, which loads every engine kind to check
a file: a front end can hold an empty catalog before any file is read. The TUI does, and its
first frame does not wait for that reader (benchmarks/tui_idle.py, docs/performance.md);
load_catalog imports it when it first reads the dirs.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from sparkdeck.config import paths
from sparkdeck.config.schema import FileProblem

if TYPE_CHECKING:
    from sparkdeck.presets import Preset

PresetProblem = FileProblem  # one problem in one preset file


@dataclass
class PresetCatalog:
    presets: dict[str, Preset] = field(default_factory=dict)
    problems: list[PresetProblem] = field(default_factory=list)

    def get(self, preset_id: str) -> Preset:
        try:
            return self.presets[preset_id]
        except KeyError:
            known = ", ".join(sorted(self.presets)) or "none"
            raise KeyError(f"no preset with id {preset_id!r} (known: {known})") from None


def load_catalog(dirs: Iterable[tuple[Path, bool]] | None = None) -> PresetCatalog:
    """Load every *.toml in the bundled then the user presets dir; later dirs win by id."""
    from sparkdeck.presets import PresetError, load_file

    if dirs is None:
        dirs = [(paths.bundled_presets_dir(), True), (paths.user_presets_dir(), False)]
    catalog = PresetCatalog()
    for directory, bundled in dirs:
        if not directory.is_dir():
            continue
        seen_here: dict[str, Path] = {}
        for path in sorted(directory.glob("*.toml")):
            try:
                preset = load_file(path, bundled=bundled)
            except PresetError as exc:
                catalog.problems.extend(exc.problems)
                continue
            if preset.id in seen_here:
                catalog.problems.append(
                    PresetProblem(
                        path, "id", f"{preset.id!r} is already used by {seen_here[preset.id]}"
                    )
                )
                continue
            seen_here[preset.id] = path
            catalog.presets[preset.id] = preset
    return catalog
