"""Image pulls: per-layer progress events and the sum of them for one progress bar."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, Protocol


class PullListener(Protocol):
    """The part of sparkdeck.launch.events.LaunchListener a pull event calls (named here so
    the runtime does not import the launch package above it)."""

    def pull_progress(self, event: PullProgress) -> None: ...


@dataclass(frozen=True)
class PullProgress:
    """One progress event of a pull, for one layer (or for the whole image when layer is None)."""

    image: str
    layer: str | None
    status: str
    current: int | None
    total: int | None
    phase: ClassVar[str | None] = "pulling"  # a launch event too (sparkdeck.launch.events)

    def describe(self) -> str:
        """One layer's step; a front end sums the layers with a PullTracker for a bar."""
        return f"pulling {self.image}: {self.layer or 'image'} {self.status}"

    def deliver(self, listener: PullListener) -> None:
        listener.pull_progress(self)


class PullTracker:
    """Adds up per-layer progress into one figure for a progress bar."""

    def __init__(self) -> None:
        self._layers: dict[str, tuple[int, int]] = {}
        self._done: set[str] = set()

    def reset(self) -> None:
        """Start over for the next pull (an image, then a model)."""
        self._layers.clear()
        self._done.clear()

    def update(self, event: PullProgress) -> None:
        if event.layer is None or event.layer in self._done:
            # a finished layer keeps its full bytes: Docker's "Extracting" events that follow
            # a download count from 0 to the layer's size again and would pull the bar back
            return
        if event.total:
            self._layers[event.layer] = (event.current or 0, event.total)
        finished = event.total is not None and event.current == event.total  # Ollama's blobs
        if finished or event.status in ("Pull complete", "Already exists", "Download complete"):
            self._done.add(event.layer)
            if event.layer in self._layers:
                total = self._layers[event.layer][1]
                self._layers[event.layer] = (total, total)

    @property
    def fraction(self) -> float | None:
        # Of the bytes announced so far. Docker announces every layer before the bytes flow;
        # Ollama announces its blobs one by one, but the weights come first and hold nearly
        # all the bytes, so the small blobs after them move the bar by less than a pixel.
        total = sum(t for _, t in self._layers.values())
        return sum(c for c, _ in self._layers.values()) / total if total else None

    @property
    def layers_done(self) -> int:
        return len(self._done)


def split_reference(image: str) -> tuple[str, str | None]:
    """'repo/name:tag' -> ('repo/name', 'tag'); a registry port is not a tag; digests stay."""
    if "@" in image:
        return image, None
    last = image.rsplit("/", 1)[-1]
    if ":" in last:
        repository, tag = image.rsplit(":", 1)
        return repository, tag
    return image, "latest"
