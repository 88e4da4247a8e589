"""Messages the workers post to the app: facts, in the past tense, carrying frozen values."""

from __future__ import annotations

from textual.message import Message

from sparkdeck.host.meminfo import MemorySnapshot
from sparkdeck.presets import PresetCatalog
from sparkdeck.ui.readers import EngineReading, GpuStatus, PresetRow


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


class EnvironmentChecked(Message):
    """The host was looked at: what NVML said, and unified memory (or why it is unreadable)."""

    def __init__(self, gpu: GpuStatus, memory: MemorySnapshot | None,
                 memory_error: str | None) -> None:
        super().__init__()
        self.gpu = gpu
        self.memory = memory
        self.memory_error = memory_error
