"""A small, strict schema for TOML tables: the preset fields and each engine kind's options.

Why not a validation library: the rules are few (type, range, choices), and the one thing that
matters is the message, which must name the file and the dotted key a user has to fix.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

_INT64 = 2**63

_TYPE_NAMES = {
    "str": "a string",
    "int": "a whole number",
    "float": "a number",
    "bool": "true or false",
    "list[str]": "a list of strings",
    "table[str]": "a table of string values",
}


@dataclass(frozen=True)
class FileProblem:
    """One thing wrong with a user-editable file: the file, the dotted key, and what to fix."""

    path: Path
    key: str | None
    message: str

    def __str__(self) -> str:
        where = f"{self.path}: {self.key}" if self.key else str(self.path)
        return f"{where}: {self.message}"


@dataclass(frozen=True)
class Option:
    """One allowed key: its type, default and limits, and a line of help for the docs."""

    type: str
    default: Any = None
    help: str = ""
    minimum: float | None = None
    maximum: float | None = None
    choices: tuple[str, ...] | None = None
    required: bool = False
    # Bounds are exclusive on the low side when True (a memory share of 0 makes no sense).
    exclusive_minimum: bool = False


def _type_ok(kind: str, value: Any) -> bool:
    # bool is a subclass of int in Python; TOML keeps them apart and so do we.
    if kind == "str":
        return isinstance(value, str)
    if kind == "int":
        return isinstance(value, int) and not isinstance(value, bool)
    if kind == "float":
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if kind == "bool":
        return isinstance(value, bool)
    if kind == "list[str]":
        return isinstance(value, list) and all(isinstance(v, str) for v in value)
    if kind == "table[str]":
        return isinstance(value, Mapping) and all(
            isinstance(k, str) and isinstance(v, str) for k, v in value.items()
        )
    raise ValueError(f"unknown option type {kind!r}")


def check_value(option: Option, value: Any) -> str | None:
    """Return why `value` is not acceptable for `option`, or None when it is."""
    if not _type_ok(option.type, value):
        return f"must be {_TYPE_NAMES[option.type]}, not {type(value).__name__} {value!r}"
    if option.type in ("int", "float"):
        if isinstance(value, float) and not math.isfinite(value):
            # TOML allows nan and inf; no setting means either, and inf overflows every
            # conversion to bytes later (int(inf))
            return f"must be a finite number, not {value!r}"
        if isinstance(value, int) and not -_INT64 <= value < _INT64:
            return f"{value!r} is out of range: TOML integers are 64-bit"
        low = option.minimum
        if low is not None and (value <= low if option.exclusive_minimum else value < low):
            relation = "above" if option.exclusive_minimum else "at least"
            return f"{value!r} is out of range: it must be {relation} {low}"
        if option.maximum is not None and value > option.maximum:
            return f"{value!r} is above the ceiling {option.maximum}"
    if option.choices is not None and value not in option.choices:
        return f"{value!r} is not one of: {', '.join(option.choices)}"
    return None


def check_table(
    schema: Mapping[str, Option], table: Mapping[str, Any], prefix: str = ""
) -> tuple[dict[str, Any], list[tuple[str, str]]]:
    """Validate a table against a schema.

    Returns the values with defaults filled in, and a list of (dotted key, problem) pairs.
    """
    values: dict[str, Any] = {}
    problems: list[tuple[str, str]] = []
    for key in table:
        if key not in schema:
            known = ", ".join(sorted(schema)) or "none"
            problems.append((prefix + str(key), f"unknown key (allowed here: {known})"))
    for key, option in schema.items():
        if key in table:
            why = check_value(option, table[key])
            if why:
                problems.append((prefix + key, why))
            else:
                values[key] = table[key]
        elif option.required:
            problems.append((prefix + key, "is required"))
        else:
            values[key] = option.default
    return values, problems
