"""Dialogs of the memory guard: the fit check's numbers before a risky launch, and the wait
for a stopped engine's memory to come back before the next one starts."""

from __future__ import annotations

import threading

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.screen import ModalScreen
from textual.widgets import Button, ProgressBar, Static

from sparkdeck.guard.fit import FitCheck
from sparkdeck.guard.switch import SwitchProgress

SKIP_RISK = (
    "Skip anyway? The next engine may not find its memory: starting it before the "
    "old one's memory is back is how a Spark wedges. Press Skip again to go on."
)


class FitModal(ModalScreen[bool]):
    """Shows why a launch does not fit, with the numbers. Dismisses True for "Launch
    anyway", False for Cancel (the focused default, and escape)."""

    BINDINGS = [Binding("escape", "cancel", "Cancel", id="fit-cancel")]

    def __init__(self, preset_id: str, fit: FitCheck) -> None:
        super().__init__()
        self.preset_id = preset_id
        self.fit = fit

    def compose(self) -> ComposeResult:
        with Vertical():
            yield Static(f"{self.preset_id} {self.fit.verdict}", classes="guard-title")
            yield Static("\n".join(self.fit.lines()), classes="guard-numbers", markup=False)
            yield Static(
                "Launching anyway can freeze the whole Spark: unified memory that "
                "runs out often wedges it with no OOM kill."
            )
            with Horizontal():
                yield Button("Launch anyway", id="launch-anyway", variant="error")
                yield Button("Cancel", id="cancel", variant="primary")

    def on_mount(self) -> None:
        self.query_one("#cancel", Button).focus()

    def on_button_pressed(self, event: Button.Pressed) -> None:
        self.dismiss(event.button.id == "launch-anyway")

    def action_cancel(self) -> None:
        self.dismiss(False)


class SwitchWaitScreen(ModalScreen[SwitchProgress | None]):
    """The wait for memory after a stop. The app feeds it `show(progress)`; it closes itself
    when the wait is over. Skip takes two presses: the first says what skipping risks."""

    BINDINGS = [Binding("s", "skip", "Skip the wait", id="switch-skip")]

    def __init__(self, engine_name: str, skip: threading.Event) -> None:
        super().__init__()
        self.engine_name = engine_name
        self.skip = skip
        self.armed = False
        self.last: SwitchProgress | None = None

    def compose(self) -> ComposeResult:
        with Vertical():
            yield Static(
                f"waiting for {self.engine_name}'s memory to come back", classes="guard-title"
            )
            yield ProgressBar(total=100, show_eta=False, id="switch-bar")
            yield Static("", id="switch-detail", classes="guard-numbers", markup=False)
            # The risk is a line of its own, not the button's label: a label that long was
            # cut to "Skip anyway:" at 80 columns.
            yield Static(SKIP_RISK, id="skip-risk", classes="guard-risk", markup=False)
            with Horizontal():
                yield Button("Skip", id="skip", variant="warning")

    def show(self, progress: SwitchProgress) -> None:
        """Update from the newest progress; close once the wait is over."""
        self.last = progress
        bar = self.query_one("#switch-bar", ProgressBar)
        bar.update(progress=min(100.0, 100.0 * progress.available / max(progress.target, 1)))
        self.query_one("#switch-detail", Static).update(progress.describe())
        if progress.done:
            self.dismiss(progress)

    def on_button_pressed(self, event: Button.Pressed) -> None:
        if event.button.id == "skip":
            self.action_skip()

    def on_mount(self) -> None:
        self.query_one("#skip-risk", Static).display = False

    def action_skip(self) -> None:
        button = self.query_one("#skip", Button)
        if not self.armed:
            self.armed = True
            self.query_one("#skip-risk", Static).display = True
            button.label = "Skip anyway"
            return
        self.skip.set()  # the waiter wakes at once and reports "skipped"
        button.disabled = True
