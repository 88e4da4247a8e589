"""Launch events across the service's socket: the same typed values on both sides.

The service sends each event of a launch it runs as `event.to_dict()` (a `launch-event`);
a front end rebuilds it with `LaunchEvent.from_dict` and hands it to the same listener it
uses for a launch it runs itself (the CLI's LaunchPrinter, the window's card and hooks), so
a launch reads the same whichever process runs it, and no front end parses sentences.

The encoding follows the dataclasses' own fields, recursively (nested snapshots such as a
FitCheck's MemorySnapshot included), with the event's class name under "type"; decoding
reads the field types from the annotations. Paths travel as text, tuples as lists. Every
event type round-trips (tests/unit/test_launch_wire.py builds one of each).
"""

from __future__ import annotations

import dataclasses
import functools
import types
import typing
from collections.abc import Callable
from pathlib import Path
from typing import Any

TYPE_KEY = "type"


class WireError(ValueError):
    """A launch event from the service that this front end cannot read (another version)."""


def encode(value: Any) -> Any:
    """A JSON-ready copy of `value`: dataclasses by field, tuples as lists, paths as text."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: encode(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, (tuple, list)):
        return [encode(v) for v in value]
    if isinstance(value, dict):
        return {str(k): encode(v) for k, v in value.items()}
    if isinstance(value, Path):
        return str(value)
    return value


def event_to_dict(event: Any) -> dict[str, Any]:
    return {TYPE_KEY: type(event).__name__, **encode(event)}


def event_from_dict(data: dict[str, Any], kinds: dict[str, type]) -> Any:
    """The event `data` describes, of one of `kinds` (class name -> class)."""
    try:
        cls = kinds[data[TYPE_KEY]]
    except (KeyError, TypeError):
        raise WireError(f"not a launch event this sparkdeck knows: {str(data)[:200]}") from None
    try:
        return decode(cls, data)
    except (KeyError, TypeError, ValueError) as exc:
        raise WireError(f"a {data[TYPE_KEY]} event this sparkdeck cannot read: {exc}") from None


def decode(kind: Any, data: Any) -> Any:
    """`data` (from encode, through JSON) back as a value of the annotated type `kind`.
    None stays None at every level."""
    return None if data is None else _decoder(kind)(data)


Decoder = Callable[[Any], Any]


def _same(data: Any) -> Any:
    return data


def _or_none(decoder: Decoder) -> Decoder:
    return lambda data: None if data is None else decoder(data)


@functools.cache
def _decoder(kind: Any) -> Decoder:
    """The function that decodes a value of `kind`, worked out once per type: a window
    decodes several snapshots a second from the service, and reading each one's annotations
    again was most of what it cost (about 8 us a value, 70 values a second)."""
    origin = typing.get_origin(kind)
    if kind is Any:
        return _same
    if origin in (typing.Union, types.UnionType):
        options = [a for a in typing.get_args(kind) if a is not type(None)]
        return _decoder(options[0]) if len(options) == 1 else _same
    if origin is tuple:
        args = typing.get_args(kind)
        if len(args) == 2 and args[1] is Ellipsis:
            item = _or_none(_decoder(args[0]))
            return lambda data: tuple(item(v) for v in data)
        items = [_or_none(_decoder(a)) for a in args]
        return lambda data: tuple(f(v) for f, v in zip(items, data, strict=True))
    if origin is list:
        (arg,) = typing.get_args(kind)
        each = _or_none(_decoder(arg))
        return lambda data: [each(v) for v in data]
    if origin is dict or kind is dict:
        return dict
    if kind is Path:
        return Path
    if isinstance(kind, type) and dataclasses.is_dataclass(kind):
        return _dataclass_decoder(kind)
    if kind is float:
        return lambda data: float(data) if isinstance(data, int) else data
    return _same


def _dataclass_decoder(cls: type) -> Decoder:
    fields: list[tuple[str, Decoder]] | None = None  # at the first value: a field may name cls

    def decode_fields(data: Any) -> Any:
        nonlocal fields
        if fields is None:
            hints = _hints(cls)
            fields = [
                (f.name, _or_none(_decoder(hints[f.name])))
                for f in dataclasses.fields(cls)
                if f.init
            ]
        return cls(**{name: field(data[name]) for name, field in fields if name in data})

    return decode_fields


@functools.cache
def _hints(cls: type) -> dict[str, Any]:
    """The resolved field types of `cls`. Names its module imports only for type checking
    (to keep a window's first frame light) are imported here, on the first event read."""
    from sparkdeck.guard.fit import FitCheck
    from sparkdeck.guard.policy import Decision
    from sparkdeck.guard.switch import SwitchProgress
    from sparkdeck.guard.timeline import StartupTimeline
    from sparkdeck.host.pagecache import FlushReport
    from sparkdeck.models.pull import PullProgress as DownloadProgress
    from sparkdeck.runtime.state import EngineState

    names = {
        "FitCheck": FitCheck,
        "Decision": Decision,
        "SwitchProgress": SwitchProgress,
        "StartupTimeline": StartupTimeline,
        "FlushReport": FlushReport,
        "DownloadProgress": DownloadProgress,
        "EngineState": EngineState,
        "Path": Path,
    }
    import sys

    module = vars(sys.modules[cls.__module__])
    return typing.get_type_hints(cls, globalns={**names, **module})
