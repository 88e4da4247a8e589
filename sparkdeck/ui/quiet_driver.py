"""Textual's Linux terminal driver, with an input thread that sleeps while nobody types.

Textual's input thread wakes ten times a second, typed at or not: to give its key parser a
tick (a lone Esc is told from the start of an escape sequence by a timeout) and to look for
its exit flag. On an idle machine each wake-up costs about 0.3 ms of CPU, not the
microseconds of work it does (docs/performance.md): 3.4 ms a second, a sixth of the idle
dashboard's CPU. This thread waits for input with no timeout while the parser holds nothing;
it ticks every TICK_S only while a key is half read and for a second after any input (as
Textual's own does), and is woken through a pipe to exit. `install` puts it in place of
Textual's driver where Textual would use its Linux driver; anything else (the web driver of
`sparkdeck web`, a driver named in TEXTUAL_DRIVER, the test harness) is left alone.
"""

from __future__ import annotations

import os
import selectors
import threading
import time
from codecs import getincrementaldecoder
from typing import TYPE_CHECKING

from textual import constants
from textual._xterm_parser import XTermParser
from textual.drivers.linux_driver import LinuxDriver

if TYPE_CHECKING:
    from textual.app import App

TICK_S = 0.1  # as Textual's own input thread: the parser's Esc timeout is looked at this often
AFTER_INPUT_S = 1.0  # keep ticking this long after a key, whatever the parser holds


class QuietLinuxDriver(LinuxDriver):
    _wake_fd: int | None = None
    _stopping = False
    _wake_lock = threading.Lock()  # the pipe is never written after it is closed

    def run_input_thread(self) -> None:
        self._stopping = False
        wake_r, self._wake_fd = os.pipe()
        selector = selectors.DefaultSelector()
        selector.register(self.fileno, selectors.EVENT_READ, "keys")
        selector.register(wake_r, selectors.EVENT_READ, "wake")
        parser = XTermParser(self._debug)
        decode = getincrementaldecoder("utf-8")().decode
        last_input = time.monotonic()  # the first second ticks: a quit at once is seen
        try:
            while not (self._stopping or self.exit_event.is_set()):
                pending = getattr(parser, "_timeout_time", None) is not None
                busy = pending or time.monotonic() - last_input < AFTER_INPUT_S
                for key, _ in selector.select(TICK_S if busy else None):
                    if key.data == "wake":
                        os.read(wake_r, 64)
                        continue
                    raw = os.read(self.fileno, 4096)
                    if not raw:  # stdin closed (piped input at its end): read no more
                        selector.unregister(self.fileno)
                        continue
                    last_input = time.monotonic()
                    text = decode(raw)  # a character cut between two reads: "" till whole
                    if text:  # (the parser takes "" as the end of the input)
                        for event in parser.feed(text):
                            self.process_message(event)
                for event in parser.tick():
                    self.process_message(event)
        finally:
            with self._wake_lock:
                wake_fd, self._wake_fd = self._wake_fd, None
                if wake_fd is not None:
                    os.close(wake_fd)
            selector.close()
            os.close(wake_r)

    def disable_input(self) -> None:
        # Textual's sets its exit flag and joins the thread: wake the thread first, or the
        # join would wait for the next key
        self._stopping = True
        with self._wake_lock:
            if self._wake_fd is not None:
                os.write(self._wake_fd, b"x")
        super().disable_input()


def install(app: App) -> None:
    """Use the quiet driver where Textual chose its plain Linux driver."""
    if constants.DRIVER is None and app.driver_class is LinuxDriver:
        app.driver_class = QuietLinuxDriver
