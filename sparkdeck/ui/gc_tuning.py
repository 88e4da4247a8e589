"""Garbage-collector settings for the interactive UI, applied by `run_app` only
(sparkdeck.ui.run).

Measured with benchmarks/chat_pane_lag.py at 2,000 tok/s (2-core test machine): CPython's
default thresholds (700, 10, 10) ran ~900 young collections and 7-8 full ones in 6 s of
streaming; each full collection walked every object of Textual, Rich and the app and took
50-200 ms, always on the UI thread and at random points, and those pauses were most of the
key-press p95 (97-242 ms per run with the defaults, 57-76 ms with these settings; 8 runs
each). Two changes, both plain CPython:

- the objects alive a few seconds after the first frame (modules, classes, the widget tree,
  the stylesheet) are collected once and then frozen: later full collections skip them;
- the youngest generation is collected every 10,000 net allocations instead of 700, and
  the middle one every 50 of those instead of 10, so the many short-lived strips and
  segments of each frame mostly die before a collection looks at them. Pooled over 8 runs
  (~480 key presses each) at 2,000 tok/s, key p95 / p99: 76 / 116 ms with the freeze alone,
  73 / 90 ms with (10,000, 10), 62 / 88 ms with (10,000, 50).

Nothing is switched off for long: from the `sparkdeck` command's start to the first frame
the collector waits (`pause_for_startup`, then `tune_for_ui` once the frame is on screen).
Importing Textual and sparkdeck builds ~70,000 container objects and leaves ~600 of them as
garbage; collecting as they were built cost 25-30 ms of the first frame (gc.callbacks, 2-core
test machine), and that garbage is freed a few seconds later by the freeze's collection.
Afterwards cycles are still found, only less often, and a frozen object stays alive (the app's
start-up objects live as long as the process anyway).
"""

from __future__ import annotations

import gc
from collections.abc import Callable

YOUNG_THRESHOLD = 10_000
MIDDLE_THRESHOLD = 50
FREEZE_AFTER_S = 3.0  # start-up objects are frozen this long after the first frame


def pause_for_startup() -> None:
    """No automatic collection until `tune_for_ui` (call before the UI's imports)."""
    gc.disable()


def tune_for_ui() -> None:
    """Collect the two younger generations less often (the oldest keeps its default), and
    collect automatically again if `pause_for_startup` paused it."""
    old = gc.get_threshold()[2]
    gc.set_threshold(YOUNG_THRESHOLD, MIDDLE_THRESHOLD, old)
    gc.enable()


def after_first_frame(set_timer: Callable[[float, Callable[[], object]], object]) -> None:
    """Collect automatically again now; freeze what start-up made FREEZE_AFTER_S later, once
    the first data is in (a collection then takes tens of ms). `set_timer`: the app's."""
    tune_for_ui()
    set_timer(FREEZE_AFTER_S, freeze_startup_objects)


def freeze_startup_objects() -> int:
    """Collect once, then move every surviving object out of future collections.

    Call when the UI is built and idle (after its first frame); returns how many objects
    were frozen."""
    gc.collect()
    gc.freeze()
    return gc.get_freeze_count()
