"""The screen's size classes (App.HORIZONTAL_BREAKPOINTS / VERTICAL_BREAKPOINTS) from the
terminal's size, before the first frame.

Textual sets them on the screen's first resize, after every widget has been styled once, and
the change restyles them all again before the first frame (with the theme chosen without its
watcher, sparkdeck.ui.themes, about 30 ms of the 0.26 s after the imports on the test
machine: docs/performance.md). Given here from the terminal's size, the first resize finds them
right and changes nothing. Where the size cannot be read (no terminal: the test harness, the
web driver) nothing is set and Textual sets them as usual; a wrong guess is corrected the
same way.
"""

from __future__ import annotations

import os
import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from textual.app import App
    from textual.screen import Screen


def breakpoint_class(size: int, breakpoints: list[tuple[int, str]]) -> str | None:
    """The class of the highest breakpoint `size` reaches (as Textual chooses it)."""
    for start, name in sorted(breakpoints, reverse=True):
        if size >= start:
            return name
    return None


def presized(screen: Screen, app: App) -> Screen:
    try:
        stderr = sys.__stderr__
        if stderr is None:  # no stderr at all (a pythonw-like start)
            return screen
        columns, rows = os.get_terminal_size(stderr.fileno())  # Textual draws there
    except (AttributeError, OSError, ValueError):  # no terminal
        return screen
    horizontal = app.HORIZONTAL_BREAKPOINTS or []
    vertical = app.VERTICAL_BREAKPOINTS or []
    chosen = {breakpoint_class(columns, horizontal), breakpoint_class(rows, vertical)}
    screen.update_classes({name: name in chosen for _, name in horizontal + vertical}, update=False)
    return screen
