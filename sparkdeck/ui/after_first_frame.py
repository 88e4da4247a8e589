"""A stand-in that mounts a widget in its place right after the first frame.

`sparkdeck` mounts its side tabs (39 of the dashboard's 63 widgets) this way: the first
frame, with the header, the presets column and the side column's empty place, then comes
~0.04 s sooner on the 2-core test machine (benchmarks/tui_idle.py, docs/performance.md).
It is the idea of Textual's `textual.lazy.Lazy`, which cannot be used as it is: a `q` pressed
before its mount made it mount into a screen that was already gone, and the app died with a
MountError instead of quitting (tests/test_tui_quick_quit.py). Here a quit that comes first
simply wins.

The stand-in is styled by the stylesheet (an id of its own, placed and sized like the
widget it stands for), so the layout does not move when the widget arrives.
"""

from __future__ import annotations

from textual.widget import MountError, Widget


class AfterFirstFrame(Widget):
    """Holds `widget` until the screen has been drawn once, then puts it in its own place."""

    def __init__(self, widget: Widget, *, id: str) -> None:  # noqa: A002 - Textual's name
        super().__init__(id=id)
        self.widget = widget

    def on_mount(self) -> None:
        self.call_after_refresh(self._swap)

    async def _swap(self) -> None:
        parent = self.parent
        if not (isinstance(parent, Widget) and parent.is_attached):
            return  # the app quit before its first frame was followed up: nothing to show
        try:
            await parent.mount(self.widget, after=self)
        except MountError:  # the screen went away while the widget was being mounted
            return
        await self.remove()
