"""How a launch's follower tells a service that ended from one that stopped answering
(sparkdeck.service.launch_follow): a killed service's exit closes its socket a moment before
the kernel marks it a zombie, and a parallel CI run caught a kill -9 in that moment and said
"stopped answering". Real processes, started and ended here."""

from __future__ import annotations

import subprocess
import sys
import time

import httpx

from sparkdeck.service.launch_follow import DYING_S, _alive, _alive_after


def _process(seconds: float) -> subprocess.Popen[bytes]:
    return subprocess.Popen([sys.executable, "-c", f"import time; time.sleep({seconds})"])


def test_a_broken_stream_waits_for_a_dying_service_and_calls_it_ended() -> None:
    dying = _process(0.4)  # still running when its stream broke, gone a moment later
    try:
        time.sleep(0.1)
        assert _alive(dying.pid)  # the old check, at that moment: "stopped answering"
        began = time.monotonic()
        assert not _alive_after(dying.pid, httpx.RemoteProtocolError("peer closed connection"))
        assert time.monotonic() - began < DYING_S
    finally:
        dying.kill()
        dying.wait()


def test_a_silent_stream_of_a_live_service_is_said_at_once_and_a_broken_one_after_a_second():
    live = _process(30)
    try:
        time.sleep(0.1)
        began = time.monotonic()
        assert _alive_after(live.pid, httpx.ReadTimeout("silent"))
        assert time.monotonic() - began < 0.2  # a silence is no exit: no wait for one
        began = time.monotonic()
        assert _alive_after(live.pid, httpx.RemoteProtocolError("peer closed connection"))
        assert DYING_S <= time.monotonic() - began < DYING_S + 0.5
    finally:
        live.kill()
        live.wait()
