"""Reading the TOML files a user (or a previous sparkdeck) wrote, with one clear error.

settings.toml, presets, themes and attached.toml are all user-editable and can hold anything:
bytes that are not UTF-8, a syntax error, or tables nested 100,000 deep (tomllib parses
those recursively and raises RecursionError, which no reader expected; and a garbage
collection that runs at that depth makes any finalizer it calls fail too, printing a
traceback). So the nesting is measured first, without recursion. Every reader calls
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
MAX_DEPTH = 100  # arrays and inline tables inside each other; a real file has a few


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
        raise TomlFileError(
            path,
            f"is larger than {MAX_BYTES // (1024 * 1024)} MiB; "
            "not a file sparkdeck wrote or expects",
        )
    return parse_toml(raw, path)


def parse_toml(raw: bytes, path: Path) -> dict[str, Any]:
    """Decode and parse `raw` (the content of `path`); raises TomlFileError."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise TomlFileError(path, f"is not UTF-8 text (byte {exc.start}: {exc.reason})") from None
    if nesting(text) > MAX_DEPTH:
        raise TomlFileError(path, "is not valid TOML: tables or arrays nested too deep")
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise TomlFileError(path, f"is not valid TOML: {excerpt(str(exc))}") from None
    except RecursionError:
        raise TomlFileError(path, "is not valid TOML: tables or arrays nested too deep") from None


def nesting(text: str) -> int:
    """The deepest nesting of arrays and inline tables in `text`, strings and comments left
    out; a table header (`[a.b]`, `[[a]]`) opens and closes on its own line. A loop, not a
    parser: it only has to say "too deep" before tomllib recurses that far."""
    deepest = depth = 0
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if c in "\"'":
            quote = c * 3 if text.startswith(c * 3, i) else c
            i += len(quote)
            while i < n and not text.startswith(quote, i):
                i += 2 if c == '"' and text[i] == "\\" else 1
            i += len(quote)
            continue
        if c == "#":
            while i < n and text[i] != "\n":
                i += 1
            continue
        if c in "[{":
            depth += 1
            deepest = max(deepest, depth)
        elif c in "]}":
            depth = max(depth - 1, 0)
        i += 1
    return deepest
