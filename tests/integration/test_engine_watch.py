"""The TUI's engine watch on the real daemon: it tells the window only what changed, and
hears of a container's start and removal from Docker's own events at once, not at its next
poll (issue 14's idle CPU: no reading every 2 s while nothing changes)."""

from __future__ import annotations

import threading
import time

import pytest

from sparkdeck.ui.engine_watch import EngineWatch
from sparkdeck.ui.messages import ChatTargetRead, EngineStateRead
from sparkdeck.ui.readers import EngineReader
from tests.conftest import busybox_preset

pytestmark = [pytest.mark.docker]

PERIOD_S = 30.0  # a poll would come after 30 s (settled: 150 s): only an event is this quick


def _readings(posted: list) -> list:
    return [m.reading for m in posted if isinstance(m, EngineStateRead)]


def _wait(predicate, timeout: float, what: str) -> float:
    began = time.monotonic()
    while not predicate():
        if time.monotonic() - began > timeout:
            raise AssertionError(f"waited {timeout} s for {what}")
        time.sleep(0.02)
    return time.monotonic() - began


def test_a_container_start_and_removal_reach_the_window_at_once(runtime, tmp_path, busybox_image):
    posted: list = []
    reads: list = []
    reader = EngineReader(lambda: runtime, health_check=lambda url: False)
    read = reader.read
    reader.read = lambda: reads.append(read()) or reads[-1]  # type: ignore[method-assign]
    watch = EngineWatch(reader, posted.append, PERIOD_S)
    stop = threading.Event()
    thread = threading.Thread(target=watch.run, args=(stop, lambda: True), daemon=True)
    thread.start()
    try:
        _wait(lambda: len(_readings(posted)) == 1, 30.0, "the first reading")
        assert _readings(posted)[0].engine is None
        assert any(isinstance(m, ChatTargetRead) for m in posted)
        watch.poll_now()  # a refresh is posted even though nothing changed
        _wait(lambda: len(_readings(posted)) == 2, 10.0, "the refreshed reading")
        time.sleep(1.5)
        assert len(_readings(posted)) == 2 and len(reads) == 2  # no poll meanwhile

        preset = busybox_preset(tmp_path, "watched", busybox_image, "sleep 60")
        engine = runtime.start(preset.container_spec())
        took = _wait(
            lambda: any(r.engine is not None for r in _readings(posted)),
            10.0,
            "the started container's reading",
        )
        assert took < 5.0, took
        assert _readings(posted)[-1].engine.container_id == engine.container_id

        runtime.stop(engine.container_id, grace=0)
        took = _wait(
            lambda: _readings(posted)[-1].engine is None, 10.0, "the removed container's reading"
        )
        assert took < 5.0, took
    finally:
        stop.set()
        watch.close()
        thread.join(timeout=10)
    assert not thread.is_alive()  # close() ends its wait at once, not after a poll period
