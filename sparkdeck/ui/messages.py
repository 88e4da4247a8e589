"""Messages the workers post to the app: facts, in the past tense, carrying frozen values."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from textual.message import Message

from sparkdeck.launch_flow import LaunchPlan, StopPlan
from sparkdeck.presets import PresetCatalog
from sparkdeck.pull_progress import PullProgress
from sparkdeck.telemetry import TelemetrySnapshot
from sparkdeck.ui.readers import ChatTarget, EngineReading, PresetRow


class CatalogLoaded(Message):
    """The preset files were read (good presets and problems both)."""

    def __init__(self, catalog: PresetCatalog, rows: list[PresetRow]) -> None:
        super().__init__()
        self.catalog = catalog
        self.rows = rows


class EngineStateRead(Message):
    """Docker answered: this is the current engine (or there is none)."""

    def __init__(self, reading: EngineReading) -> None:
        super().__init__()
        self.reading = reading

    def can_replace(self, message: Message) -> bool:
        # Only the latest engine reading matters: a newer one replaces an unhandled older one.
        return isinstance(message, (EngineStateRead, DockerConnectionFailed))


class DockerConnectionFailed(Message):
    """The Docker daemon could not be reached; `error` says why and what to do."""

    def __init__(self, error: str) -> None:
        super().__init__()
        self.error = error

    def can_replace(self, message: Message) -> bool:
        return isinstance(message, (EngineStateRead, DockerConnectionFailed))


class ChatTargetRead(Message):
    """What the chat tab should talk to now (read with each engine poll)."""

    def __init__(self, target: ChatTarget) -> None:
        super().__init__()
        self.target = target

    def can_replace(self, message: Message) -> bool:
        return isinstance(message, ChatTargetRead)


class TelemetrySampled(Message):
    """The sampler read the machine; `history` holds each sparkline series up to now."""

    def __init__(self, snapshot: TelemetrySnapshot,
                 history: Mapping[str, tuple[float, ...]]) -> None:
        super().__init__()
        self.snapshot = snapshot
        self.history = history

    def can_replace(self, message: Message) -> bool:
        # The history travels with every sample, so dropping an older unhandled one loses
        # nothing: a slow UI skips frames instead of falling behind the sampler.
        return isinstance(message, TelemetrySampled)


class LaunchPlanned(Message):
    """A launch (or stop) was planned; the app asks the user to confirm it."""

    def __init__(self, plan: LaunchPlan | StopPlan) -> None:
        super().__init__()
        self.plan = plan


class LaunchProgressed(Message):
    """The launch or stop reported a step (a sparkdeck.launcher event)."""

    def __init__(self, event: Any) -> None:
        super().__init__()
        self.event = event

    def can_replace(self, message: Message) -> bool:
        # A pull sends many progress events; only the newest of a run of them matters.
        return (isinstance(self.event, PullProgress) and isinstance(message, LaunchProgressed)
                and isinstance(message.event, PullProgress))


class LaunchFinished(Message):
    """The launch or stop ended, done or failed (a failure is reported by the worker's error)."""

    def __init__(self, action: str) -> None:
        super().__init__()
        self.action = action


class LogLinesRead(Message):
    """New lines from the engine container's log."""

    def __init__(self, container_id: str, lines: list[str]) -> None:
        super().__init__()
        self.container_id = container_id
        self.lines = lines
