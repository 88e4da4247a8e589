"""Sparklines drawn from zero to a stated ceiling, for the history view.

Textual's Sparkline scales each line from its own minimum to its maximum, so MemAvailable
moving by 50 MiB of 120 GiB draws as a ramp from the floor to the top: a dip that is not
there. These bars start at zero and end at the series' ceiling (MemTotal for memory, at
least 10 % for PSI, the window's highest value for power and tok/s), so the height of a bar
means the same thing at every window.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from textual.content import Content
from textual.reactive import reactive
from textual.widget import Widget

BARS = "▁▂▃▄▅▆▇█"


def bar_lines(
    values: Sequence[float | None],
    width: int,
    height: int,
    ceiling: float,
    worst: Callable[[Sequence[float]], float],
) -> list[str]:
    """`height` lines of `width` cells, top line first; each cell the worst value of its
    share of `values` (a dip is never averaged away), at least the lowest bar when recorded,
    blank where its values are all None (not recorded)."""
    if not values or width < 1 or height < 1:
        return [""] * max(height, 0)
    levels = len(BARS) * height
    cells = []
    for column in range(width):
        low = column * len(values) // width
        high = max(low + 1, (column + 1) * len(values) // width)
        known = [v for v in values[low:high] if v is not None]
        if not known:
            cells.append(0)
            continue
        share = max(0.0, min(1.0, worst(known) / ceiling)) if ceiling > 0 else 0.0
        cells.append(max(1, round(share * levels)))
    lines = []
    for row in reversed(range(height)):  # the top line first
        line = []
        for level in cells:
            part = level - row * len(BARS)
            line.append("█" if part >= len(BARS) else " " if part <= 0 else BARS[part - 1])
        lines.append("".join(line))
    return lines


class ScaledBars(Widget):
    """A sparkline from zero to `ceiling`; as wide and high as its styles make it."""

    DEFAULT_CSS = "ScaledBars { height: 2; }"

    values: reactive[tuple[float | None, ...]] = reactive(tuple)
    ceiling: reactive[float] = reactive(1.0)

    def __init__(
        self,
        worst: Callable[[Sequence[float]], float],
        *,
        id: str | None = None,
        classes: str | None = None,
    ) -> None:
        super().__init__(id=id, classes=classes)
        self.worst = worst

    def render(self) -> Content:
        return Content(
            "\n".join(
                bar_lines(self.values, self.size.width, self.size.height, self.ceiling, self.worst)
            )
        )
