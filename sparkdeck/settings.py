"""settings.toml: the user's choices that are not presets (theme, memory-guard thresholds).

The file lives in the config dir; a missing file means the defaults. A bad value is named
with its file and dotted key and the whole file is refused (half-applied settings would be
worse for a safety guard than none). Writes go through `atomic_write_text` and keep every
other key the user wrote.
"""

from __future__ import annotations

import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

import tomli_w

from sparkdeck import paths
from sparkdeck.schema import FileProblem, Option, check_table

SETTINGS_FILE = "settings.toml"


class SettingsError(ValueError):
    """settings.toml is unreadable or holds bad values; `problems` names each file and key."""

    def __init__(self, problems: list[FileProblem]):
        super().__init__("\n".join(str(p) for p in problems))
        self.problems = problems


@dataclass(frozen=True)
class UiSettings:
    theme: str = "spark-dark"


@dataclass(frozen=True)
class GuardSettings:
    """Memory-guard thresholds (issue 5). Percentages are of MemTotal or of wall time."""

    # "stop" stops sparkdeck's own engine at the stop thresholds; "warn" only warns. Warn-only
    # exists for people who know what they do, and is never the default.
    mode: str = "stop"
    warn_available_pct: float = 10.0
    warn_some_avg10: float = 10.0
    stop_available_pct: float = 5.0
    stop_full_rate_pct: float = 5.0
    stop_consecutive: int = 3
    startup_hz: float = 2.0
    running_hz: float = 1.0
    switch_timeout_s: float = 120.0
    switch_margin_gib: float = 2.0
    sglang_reserve_gib: float = 6.0


@dataclass(frozen=True)
class Settings:
    ui: UiSettings = field(default_factory=UiSettings)
    guard: GuardSettings = field(default_factory=GuardSettings)


_PCT = {"minimum": 0.0, "maximum": 100.0}
_SCHEMA: dict[str, dict[str, Option]] = {
    "ui": {"theme": Option("str", UiSettings.theme, "theme name (see themes/)")},
    "guard": {
        "mode": Option("str", GuardSettings.mode, "stop or warn", choices=("stop", "warn")),
        "warn_available_pct": Option("float", GuardSettings.warn_available_pct,
                                     "warn when MemAvailable is below this % of MemTotal", **_PCT),
        "warn_some_avg10": Option("float", GuardSettings.warn_some_avg10,
                                  "warn when PSI some avg10 is above this", **_PCT),
        "stop_available_pct": Option("float", GuardSettings.stop_available_pct,
                                     "stop the engine below this % MemAvailable", **_PCT),
        "stop_full_rate_pct": Option("float", GuardSettings.stop_full_rate_pct,
                                     "stop when the PSI full stall rate exceeds this %", **_PCT),
        "stop_consecutive": Option("int", GuardSettings.stop_consecutive,
                                   "samples in a row over the full-stall threshold", minimum=1,
                                   maximum=60),
        "startup_hz": Option("float", GuardSettings.startup_hz, "samples per second while "
                             "starting", minimum=0.1, maximum=20.0),
        "running_hz": Option("float", GuardSettings.running_hz, "samples per second once ready",
                             minimum=0.1, maximum=20.0),
        "switch_timeout_s": Option("float", GuardSettings.switch_timeout_s,
                                   "longest wait for memory to come back after a stop",
                                   minimum=0.0, maximum=3600.0),
        "switch_margin_gib": Option("float", GuardSettings.switch_margin_gib,
                                    "how close to the pre-launch MemAvailable counts as back",
                                    minimum=0.0, maximum=128.0),
        "sglang_reserve_gib": Option("float", GuardSettings.sglang_reserve_gib,
                                     "activation reserve on top of SGLang's static fraction",
                                     minimum=0.0, maximum=128.0),
    },
}
_CLASSES = {"ui": UiSettings, "guard": GuardSettings}


def settings_path() -> Path:
    return paths.config_dir() / SETTINGS_FILE


def _read_table(path: Path) -> dict[str, Any]:
    try:
        with path.open("rb") as fh:
            return tomllib.load(fh)
    except FileNotFoundError:
        return {}
    except tomllib.TOMLDecodeError as exc:
        raise SettingsError([FileProblem(path, None, f"not valid TOML: {exc}")]) from None
    except OSError as exc:
        raise SettingsError([FileProblem(path, None, f"cannot read: {exc.strerror}")]) from None


def parse_settings(table: Mapping[str, Any], path: Path) -> Settings:
    problems: list[FileProblem] = []
    for key in table:
        if key not in _SCHEMA:
            problems.append(FileProblem(path, key, "unknown section (allowed: "
                                        + ", ".join(sorted(_SCHEMA)) + ")"))
    sections: dict[str, Any] = {}
    for name, schema in _SCHEMA.items():
        raw = table.get(name, {})
        if not isinstance(raw, Mapping):
            problems.append(FileProblem(path, name, "must be a table"))
            continue
        values, bad = check_table(schema, raw, prefix=f"{name}.")
        problems += [FileProblem(path, key, why) for key, why in bad]
        sections[name] = _CLASSES[name](**{f.name: values[f.name]
                                           for f in fields(_CLASSES[name]) if f.name in values})
    if not problems:
        guard = sections["guard"]
        if guard.stop_available_pct > guard.warn_available_pct:
            problems.append(FileProblem(path, "guard.stop_available_pct",
                                        "must not be above guard.warn_available_pct"))
    if problems:
        raise SettingsError(problems)
    return Settings(ui=sections["ui"], guard=sections["guard"])


def load_settings(path: Path | None = None) -> Settings:
    """The user's settings (defaults where the file is silent). Raises SettingsError."""
    path = path or settings_path()
    return parse_settings(_read_table(path), path)


def save_setting(section: str, key: str, value: Any, path: Path | None = None) -> None:
    """Change one key, keep everything else in the file, write atomically.

    The new value is checked first: a value load_settings would refuse is never written.
    """
    path = path or settings_path()
    table = _read_table(path)
    parse_settings(table, path)  # a file that is already bad is reported, never overwritten
    current = dict(table.get(section, {}))
    current[key] = value
    updated = {**table, section: current}
    parse_settings(updated, path)
    paths.atomic_write_text(path, tomli_w.dumps(updated), mode=0o644)
