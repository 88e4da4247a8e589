"""Containers that draw nothing of their own: no border, no title, no text, only their
children (and their background where no child is).

Textual's compositor renders every widget whose container overlaps the rows a frame
repaints, and renders each one whole. A frame that draws one new sparkline row therefore
renders every container on the way down to it (the main area, the side column, its tabs, the
open tab's pane, the machine tab, a panel's row of figures) whether or not anything in them
changed: about 0.08 ms each from their caches on the test machine, with the screen's own
children most of a ready engine's 1 Hz frame (docs/performance.md, 2026-12-05). Textual's
public `Widget.BLANK` ("no border, no content") renders such a widget as blank rows in its
own colours instead, about 0.006 ms. The screen looks the same: what a container shows where
no child covers it is its background, and that is what a blank row is drawn in
(tests/unit/test_ui_blank_containers.py compares every cell and style).

The same rule makes a blank container a wall: what it holds is rendered only when the frame's
rows reach the container. The screen's own children have the whole screen as their container
and were rendered in every frame; the header, the glance strip, the guard line and the footer
each sit in a blank container of their own for that (ui/app.py).

Only a container without a border, a border title or content of its own may be one: BLANK
draws none of those. (Scroll bars are widgets of their own, drawn as before.)
"""

from __future__ import annotations

from textual.containers import Horizontal, Vertical


class BlankColumn(Vertical):
    """A Vertical that draws only its children and its background."""

    BLANK = True


class BlankRow(Horizontal):
    """A Horizontal that draws only its children and its background."""

    BLANK = True
