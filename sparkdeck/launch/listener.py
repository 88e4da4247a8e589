"""The hooks a front end overrides to treat some launch events apart (a progress bar, the
hand-over to the running watchdog): one per event, each defaulting to `other(event)`.
`event.deliver(listener)` (sparkdeck.launch.events) calls the one hook for that event, so no
front end tests an event's type.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, ClassVar

if TYPE_CHECKING:
    from sparkdeck.launch.events import (
        CacheFlushed,
        CleanupHurried,
        CleanupStopping,
        ContainerStarted,
        EngineReady,
        FitChecked,
        FlushSkipped,
        GuardDecided,
        GuardFailed,
        LaunchEvent,
        ModelDownloaded,
        ModelDownloading,
        ModelDownloadStarted,
        ModelInCache,
        ModelPullStarted,
        PreviousStopped,
        PreviousStopping,
        PullStarted,
        RepliesAwaited,
        SwitchWaited,
        TimelineSaved,
    )
    from sparkdeck.runtime.pull import PullProgress


class LaunchListener:
    """One hook per event; each defaults to `other(event)`, which does nothing. A front end
    overrides the hooks it treats apart and `other` for the rest."""

    def other(self, event: LaunchEvent) -> None:
        """Every event whose hook is not overridden."""

    def pull_started(self, event: PullStarted) -> None:
        self.other(event)

    def model_pull_started(self, event: ModelPullStarted) -> None:
        self.other(event)

    def pull_progress(self, event: PullProgress) -> None:
        self.other(event)

    def fit_checked(self, event: FitChecked) -> None:
        self.other(event)

    def model_in_cache(self, event: ModelInCache) -> None:
        self.other(event)

    def model_download_started(self, event: ModelDownloadStarted) -> None:
        self.other(event)

    def model_downloading(self, event: ModelDownloading) -> None:
        self.other(event)

    def model_downloaded(self, event: ModelDownloaded) -> None:
        self.other(event)

    def replies_awaited(self, event: RepliesAwaited) -> None:
        self.other(event)

    def previous_stopping(self, event: PreviousStopping) -> None:
        self.other(event)

    def previous_stopped(self, event: PreviousStopped) -> None:
        self.other(event)

    def switch_waited(self, event: SwitchWaited) -> None:
        self.other(event)

    def cache_flushed(self, event: CacheFlushed) -> None:
        self.other(event)

    def flush_skipped(self, event: FlushSkipped) -> None:
        self.other(event)

    def container_started(self, event: ContainerStarted) -> None:
        self.other(event)

    def guard_decided(self, event: GuardDecided) -> None:
        self.other(event)

    def guard_failed(self, event: GuardFailed) -> None:
        self.other(event)

    def timeline_saved(self, event: TimelineSaved) -> None:
        self.other(event)

    def engine_ready(self, event: EngineReady) -> None:
        self.other(event)

    def cleanup_stopping(self, event: CleanupStopping) -> None:
        self.other(event)

    def cleanup_hurried(self, event: CleanupHurried) -> None:
        self.other(event)


class Step:
    """What every launch event knows about itself: `describe()` is the sentence the CLI
    prints and the engine card and guard line show, `phase` the engine card's state word
    while the step runs, `deliver(listener)` calls the listener's one hook for it."""

    phase: ClassVar[str | None] = None  # the card's state word; None leaves it as it was

    def describe(self) -> str:
        raise NotImplementedError

    def deliver(self, listener: LaunchListener) -> None:
        raise NotImplementedError
