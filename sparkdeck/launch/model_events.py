"""The launch events of a preset's model: found in the cache, downloaded from the Hub before
the engine starts, or pulled by the engine itself (Ollama). Part of the one LaunchEvent union
(sparkdeck.launch.events), kept here so that module stays the launch's own steps.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

from sparkdeck.host.meminfo import gib
from sparkdeck.launch.listener import Step

if TYPE_CHECKING:
    from sparkdeck.launch.listener import LaunchListener
    from sparkdeck.models.pull import PullProgress as DownloadProgress


@dataclass(frozen=True)
class ModelPullStarted(Step):
    """The engine is up but lacks the preset's model: it is being pulled (Ollama)."""

    model: str
    phase: ClassVar[str | None] = "pulling"

    def describe(self) -> str:
        return f"the engine is up; model {self.model} is not in it yet: pulling it"

    def deliver(self, listener: LaunchListener) -> None:
        listener.model_pull_started(self)


@dataclass(frozen=True)
class ModelInCache(Step):
    """The preset's Hub model is complete in the cache: nothing to download."""

    repo: str
    size: int | None  # bytes of the files the engine loads (None: the Hub was not asked)
    note: str | None = None  # e.g. the Hub could not be asked, so the cache was trusted

    def describe(self) -> str:
        parts = [gib(self.size)] if self.size is not None else []
        parts += [self.note] if self.note else []
        said = f" ({'; '.join(parts)})" if parts else ""
        return f"model {self.repo} is in the cache{said}; the engine starts with the Hub offline"

    def deliver(self, listener: LaunchListener) -> None:
        listener.model_in_cache(self)


@dataclass(frozen=True)
class ModelDownloadStarted(Step):
    """The preset's Hub model is missing (or partly here): it is downloaded before the
    engine starts, so no engine downloads during its start-up."""

    repo: str
    commit: str
    files: int
    needed: int  # bytes still to fetch
    total: int  # bytes of every file the engine loads
    phase: ClassVar[str | None] = "pulling"

    def describe(self) -> str:
        return (
            f"model {self.repo} is not in the cache: downloading {gib(self.needed)} "
            f"({self.files} file(s), {gib(self.total)} in all, commit "
            f"{self.commit[:12]}) before the engine starts"
        )

    def deliver(self, listener: LaunchListener) -> None:
        listener.model_download_started(self)


@dataclass(frozen=True)
class ModelDownloading(Step):
    """Progress of that download (sent when a file begins, at each 5 % and every 10 s)."""

    repo: str
    progress: DownloadProgress
    phase: ClassVar[str | None] = "pulling"

    @property
    def fraction(self) -> float:
        p = self.progress
        return p.done / p.total if p.total else 0.0

    def describe(self) -> str:
        p = self.progress
        eta = f"{p.eta_s:.0f} s" if p.eta_s is not None else "?"
        return (
            f"downloading {self.repo}: {self.fraction:4.0%} ({gib(p.done)} of "
            f"{gib(p.total)}), {p.rate / 2**20:.1f} MiB/s, ETA {eta}; file {p.file}"
        )

    def deliver(self, listener: LaunchListener) -> None:
        listener.model_downloading(self)


@dataclass(frozen=True)
class ModelDownloaded(Step):
    repo: str
    fetched: int  # bytes fetched
    seconds: float

    def describe(self) -> str:
        return (
            f"downloaded {self.repo}: {gib(self.fetched)} in {self.seconds:.1f} s; the "
            "engine starts with the Hub offline"
        )

    def deliver(self, listener: LaunchListener) -> None:
        listener.model_downloaded(self)
