"""Messages the app's own workers post to it: facts, in the past tense, carrying frozen
values; and the worker bodies that read them (plain functions, so app.py stays wiring).
Widgets that run workers nest their messages in their own class."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

from textual.message import Message

from sparkdeck.runtime.errors import DockerNotAnswering, DockerUnavailable
from sparkdeck.ui.readers import (
    ChatTarget,
    EngineReader,
    EngineReading,
    PresetRow,
    chat_target,
    memory_total,
    preset_rows,
)

if TYPE_CHECKING:  # the preset files' reader loads with the first catalog read
    from sparkdeck.config.settings import GuardSettings
    from sparkdeck.presets import PresetCatalog


@dataclass
class CatalogLoaded(Message):
    """The preset files were read (good presets and problems both)."""

    catalog: PresetCatalog
    rows: list[PresetRow]


@dataclass
class EngineStateRead(Message):
    """Docker answered: this is the current engine (or there is none)."""

    reading: EngineReading

    def can_replace(self, message: Message) -> bool:
        # Only the latest engine reading matters: a newer one replaces an unhandled older one.
        return isinstance(message, (EngineStateRead, DockerConnectionFailed))


@dataclass
class DockerConnectionFailed(Message):
    """The Docker daemon could not be reached; `error` says why and what to do.
    `not_answering`: it took the call but sent no reply in time (stopped or hung)."""

    error: str
    not_answering: bool = False

    def can_replace(self, message: Message) -> bool:
        return isinstance(message, (EngineStateRead, DockerConnectionFailed))


@dataclass
class ChatTargetRead(Message):
    """What the chat and metrics tabs should talk to now (read with each engine poll)."""

    target: ChatTarget

    def can_replace(self, message: Message) -> bool:
        return isinstance(message, ChatTargetRead)


def read_presets() -> PresetCatalog:
    """The bundled and the user's preset files: the files' reader (it loads every engine
    kind) is imported here, in the "load presets" worker, after the first frame."""
    from sparkdeck.presets import load_catalog

    return load_catalog()


def catalog_loaded(loader: Callable[[], PresetCatalog], guard: GuardSettings) -> CatalogLoaded:
    """Read the preset files and size each preset's claim (the "load presets" worker)."""
    catalog = loader()
    return CatalogLoaded(catalog, preset_rows(catalog, memory_total(), guard))


def engine_poll(reader: EngineReader) -> Iterator[Message]:
    """The "read engine" worker's messages, in order: Docker's answer (or why there is
    none), then what chat and metrics talk to. The caller stops when it is cancelled."""
    reading = None
    try:
        reading = reader.read()
        yield EngineStateRead(reading)
    except DockerUnavailable as exc:
        yield DockerConnectionFailed(str(exc), isinstance(exc, DockerNotAnswering))
    yield ChatTargetRead(chat_target(reading, reader.health_check))
