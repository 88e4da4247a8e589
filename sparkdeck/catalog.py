"""The preset catalog as a value: the presets read and the problems found in their files.

Kept apart from sparkdeck.presets, the files' reader, which loads every engine kind to check
a file: a front end can hold an empty catalog before any file is read. The TUI does, and its
first frame does not wait for that reader (benchmarks/tui_idle.py, docs/performance.md).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

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
