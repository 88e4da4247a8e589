"""Messages the app's own workers post to it: facts, in the past tense, carrying frozen
values; and the worker bodies that read them (plain functions, so app.py stays wiring).
Widgets that run workers nest their messages in their own class; the watchdogs' decision
(GuardDecisionMade) is here because two of them post it. Last, the one path a failed worker
takes to the user (report_worker_failure)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from textual.app import App
from textual.message import Message
from textual.worker import Worker, WorkerState

from sparkdeck.runtime.errors import DockerNotAnswering, DockerUnavailable
from sparkdeck.text_safety import excerpt
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
    from sparkdeck.catalog import PresetCatalog
    from sparkdeck.config.settings import GuardSettings
    from sparkdeck.guard.policy import Decision  # loaded with the first watchdog


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


@dataclass
class GuardDecisionMade(Message):
    """A watchdog decided on its newest reading (ok, warn or stop): the running one
    (WatchdogLine's) or a launch's start-up one (through the launch's events)."""

    decision: Decision

    def can_replace(self, message: Message) -> bool:
        # The latest reading wins, except that a stop must never be replaced unseen.
        return isinstance(message, GuardDecisionMade) and message.decision.level != "stop"


def read_presets() -> PresetCatalog:
    """The bundled and the user's preset files: the files' reader (it loads every engine
    kind) is imported here, in the "load presets" worker, after the first frame."""
    from sparkdeck.catalog import load_catalog

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


def report_worker_failure(app: App[Any], event: Worker.StateChanged) -> None:
    """Notify when `event` says a worker ended in an error (markup off: the message may
    quote a server or a file, and must be shown as written).

    `Worker.StateChanged` does not bubble: the app's handler sees only the workers the app
    started. A widget or screen that starts workers of its own forwards their state changes
    here (ChatPane, ConversationsScreen), and so does the app, so every failure reads the same.
    """
    if event.state != WorkerState.ERROR:
        return
    error = event.worker.error
    message = excerpt(str(error), 500) or type(error).__name__
    app.notify(
        message,
        title=f"{event.worker.name or 'a background task'} failed",
        severity="error",
        markup=False,
    )
