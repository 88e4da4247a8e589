"""Reading the TOML files a user (or a previous sparkdeck) wrote, with one clear error.

settings.toml, presets, themes and attached.toml are all user-editable and can hold anything:
bytes that are not UTF-8, a syntax error, or tables nested 100,000 deep (tomllib parses
those recursively and raises RecursionError, which no reader expected). Every reader calls
`read_toml`, which turns each of those into one `TomlFileError` naming the file, so a
reader reports it as its own typed error and a bad file never stops anything else.
"""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any

from sparkdeck.text_safety import excerpt

# Far above any real settings file or preset (a few kB), far below what would take a while
# to parse: a file larger than this is not one a person wrote for sparkdeck.
MAX_BYTES = 4 * 1024 * 1024


class TomlFileError(ValueError):
    """A TOML file could not be read or parsed; `path` is the file, `reason` says why."""

    def __init__(self, path: Path, reason: str):
        super().__init__(f"{path}: {reason}")
        self.path, self.reason = path, reason


def read_toml(path: Path, *, missing_ok: bool = False) -> dict[str, Any]:
    """The table in `path`; {} for a missing file when `missing_ok`. Raises TomlFileError."""
    try:
        with path.open("rb") as fh:
            raw = fh.read(MAX_BYTES + 1)
    except FileNotFoundError:
        if missing_ok:
            return {}
        raise TomlFileError(path, "does not exist") from None
    except OSError as exc:
        raise TomlFileError(path, f"cannot be read: {exc.strerror or exc}") from None
    if len(raw) > MAX_BYTES:
        raise TomlFileError(path, f"is larger than {MAX_BYTES // (1024 * 1024)} MiB; "
                                  "not a file sparkdeck wrote or expects")
    return parse_toml(raw, path)


def parse_toml(raw: bytes, path: Path) -> dict[str, Any]:
    """Decode and parse `raw` (the content of `path`); raises TomlFileError."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise TomlFileError(path, f"is not UTF-8 text (byte {exc.start}: {exc.reason})"
                            ) from None
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise TomlFileError(path, f"is not valid TOML: {excerpt(str(exc))}") from None
    except RecursionError:
        raise TomlFileError(path, "is not valid TOML: tables or arrays nested too deep"
                            ) from None
