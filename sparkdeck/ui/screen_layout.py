"""How the dashboard's screen is laid out and drawn, around Textual's own machinery: its size
classes given before the first frame, a stand-in for what is mounted after that frame, and
containers that draw nothing of their own.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING

from textual.containers import Horizontal, Vertical
from textual.widget import MountError, Widget

if TYPE_CHECKING:
    from textual.app import App
    from textual.screen import Screen


# The screen's size classes (App.HORIZONTAL_BREAKPOINTS / VERTICAL_BREAKPOINTS) from the
# terminal's size, before the first frame.
#
# Textual sets them on the screen's first resize, after every widget has been styled once, and
# the change restyles them all again before the first frame (with the theme chosen without its
# watcher, sparkdeck.ui.themes, about 30 ms of the 0.26 s after the imports on the test
# machine: docs/performance.md). Given here from the terminal's size, the first resize finds them
# right and changes nothing. Where the size cannot be read (no terminal: the test harness, the
# web driver) nothing is set and Textual sets them as usual; a wrong guess is corrected the
# same way.


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


# A stand-in that holds a widget's place until the first frame is on screen.
#
# `sparkdeck` mounts its side tabs (39 of the dashboard's 63 widgets) this way, and imports
# their modules (the four tabs, the telemetry sampler and its host readers, Textual's
# TabbedContent) only then: the first frame, with the header, the glance strip, the presets
# column and the side column's empty place, comes that much sooner (benchmarks/tui_idle.py,
# docs/performance.md). It is the idea of Textual's `textual.lazy.Lazy`, which cannot be used
# as it is: a `q` pressed before its mount made it mount into a screen that was already gone,
# and the app died with a MountError instead of quitting
# (tests/integration/test_tui_quick_quit.py). Here a quit that comes first simply wins.
#
# The stand-in is styled by the stylesheet (an id of its own, placed and sized like the
# widget it stands for), so the layout does not move when the widget arrives. The widget is
# made by its owner's callback, in the owner's context: that is where Textual's `data_bind`
# looks for the reactives it binds.


class AfterFirstFrame(Widget):
    """An empty place, sized by the stylesheet like the widget that will take it."""


async def put_in_place(stand_in: AfterFirstFrame, make: Callable[[], Widget]) -> Widget | None:
    """Mount what `make` returns where `stand_in` is, and remove the stand-in.

    Returns the widget, or None when the app quit before this ran (nothing is made then)."""
    parent = stand_in.parent
    if not (isinstance(parent, Widget) and parent.is_attached):
        return None  # the app quit before its first frame was followed up: nothing to show
    widget = make()
    try:
        await parent.mount(widget, after=stand_in)
    except MountError:  # the screen went away while the widget was being mounted
        return None
    await stand_in.remove()
    return widget


# Containers that draw nothing of their own: no border, no title, no text, only their
# children (and their background where no child is).
#
# Textual's compositor renders every widget whose container overlaps the rows a frame
# repaints, and renders each one whole. A frame that draws one new sparkline row therefore
# renders every container on the way down to it (the main area, the side column, its tabs, the
# open tab's pane, the machine tab, a panel's row of figures) whether or not anything in them
# changed: about 0.08 ms each from their caches on the test machine, with the screen's own
# children most of a ready engine's 1 Hz frame (docs/performance.md, 2026-12-05). Textual's
# public `Widget.BLANK` ("no border, no content") renders such a widget as blank rows in its
# own colours instead, about 0.006 ms. The screen looks the same: what a container shows where
# no child covers it is its background, and that is what a blank row is drawn in
# (tests/unit/test_ui_blank_containers.py compares every cell and style).
#
# The same rule makes a blank container a wall: what it holds is rendered only when the frame's
# rows reach the container. The screen's own children have the whole screen as their container
# and were rendered in every frame; the header, the glance strip, the guard line and the footer
# each sit in a blank container of their own for that (ui/app.py).
#
# Only a container without a border, a border title or content of its own may be one: BLANK
# draws none of those. (Scroll bars are widgets of their own, drawn as before.)


class BlankColumn(Vertical):
    """A Vertical that draws only its children and its background."""

    BLANK = True


class BlankRow(Horizontal):
    """A Horizontal that draws only its children and its background."""

    BLANK = True
