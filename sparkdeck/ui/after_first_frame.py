"""A stand-in that holds a widget's place until the first frame is on screen.

`sparkdeck` mounts its side tabs (39 of the dashboard's 63 widgets) this way, and imports
their modules (the four tabs, the telemetry sampler and its host readers, Textual's
TabbedContent) only then: the first frame, with the header, the glance strip, the presets
column and the side column's empty place, comes that much sooner (benchmarks/tui_idle.py,
docs/performance.md). It is the idea of Textual's `textual.lazy.Lazy`, which cannot be used
as it is: a `q` pressed before its mount made it mount into a screen that was already gone,
and the app died with a MountError instead of quitting
(tests/integration/test_tui_quick_quit.py). Here a quit that comes first simply wins.

The stand-in is styled by the stylesheet (an id of its own, placed and sized like the
widget it stands for), so the layout does not move when the widget arrives. The widget is
made by its owner's callback, in the owner's context: that is where Textual's `data_bind`
looks for the reactives it binds.
"""

from __future__ import annotations

from collections.abc import Callable

from textual.widget import MountError, Widget


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
