"""`sparkdeck guard` ends with "the engine is gone" only when no stop of the guard's was
under way: a stop attempt heard within STOP_WORD_S holds that word back for the stop's own.

Seen in a parallel CI run (2026-12-04): the service's stop of an engine that Docker took
longer than one attempt to remove (attempt: not done) was said by the command as "the engine
is gone: nothing left to guard", exit 0, where its own stop says "stopped ...", exit 1.
Real Docker: a busybox container of the test's scope, started and removed.
"""

from __future__ import annotations

import threading
import time

import pytest

from sparkdeck.cli.commands.guard import STOP_WORD_S, _Output, _until_gone
from sparkdeck.config.settings import GuardSettings
from sparkdeck.guard.policy import WatchdogPolicy
from sparkdeck.guard.readings import HostReadings
from sparkdeck.guard.stopper import ContainerStopper
from sparkdeck.guard.watchdog import Watchdog
from tests.support.busybox_engines import sleeper

pytestmark = [pytest.mark.docker]


def _gone_after(runtime, tmp_path, busybox_image, last_attempt: list[float]) -> float | None:
    """Start an engine, remove it, follow it as the command does: seconds until the command
    said "gone" (None: not within 2 polls past STOP_WORD_S)."""
    engine = runtime.start(sleeper(tmp_path, busybox_image).container_spec())
    dog = Watchdog(
        WatchdogPolicy(GuardSettings()),
        HostReadings(),
        ContainerStopper.for_engine(runtime, engine.container_id),
        engine=engine.name,
    )
    done = threading.Event()
    said: list[str] = []
    out = _Output(as_json=True, done=done)
    out._line = said.append  # type: ignore[method-assign]  # the lines, not stdout
    runtime.stop(engine.container_id, grace=0)
    began = time.monotonic()
    if last_attempt:
        last_attempt[:] = [began]  # an attempt of the service's, heard just now
    thread = threading.Thread(
        target=_until_gone, args=(runtime, engine.container_id, done, dog, out, last_attempt)
    )
    thread.start()
    try:
        ended = done.wait(STOP_WORD_S + 4.5)
        return time.monotonic() - began if ended and any('"gone"' in s for s in said) else None
    finally:
        done.set()
        thread.join(timeout=10)


def test_an_engine_gone_by_other_means_is_said_within_one_poll(runtime, tmp_path, busybox_image):
    after = _gone_after(runtime, tmp_path, busybox_image, [])
    assert after is not None and after < 2.0 + 1.0, after  # polled every 2 s


def test_an_engine_gone_while_a_stop_was_under_way_waits_for_that_stops_word(
    runtime, tmp_path, busybox_image
):
    after = _gone_after(runtime, tmp_path, busybox_image, [0.0])
    # not before STOP_WORD_S (the stop's word, "stopped", ends the command first), and still
    # said after it when that word never comes (a service lost mid-stop)
    assert after is not None and STOP_WORD_S <= after < STOP_WORD_S + 2.0 + 1.0, after
