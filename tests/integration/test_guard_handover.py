"""A stop the watchdog decided is carried through even when memory comes back before it is
(issue 31, item 7).

A watchdog's host can end while its stop is still pending: a launch's start-up guard at
ready, a window's line that restarts its loop, a `SPARKDECK_SERVICE=off` CLI that exits, a
service that dies. The next watchdog of the same container used to start afresh, and when
its first reading had recovered the stop was forgotten with the engine still running.

Real parts: the shared Docker daemon with a busybox engine, this host's real readings, a
real memory hog (tests/support/memory_hog.py) that takes MemAvailable below a stop line
raised into the hog's reach (as tests/integration/test_service.py does: the box is never
endangered),
and a stop that fails once for real: its first call goes to a Docker socket that never
answers (tests/support/hung_docker.py's `hung_daemon`), so it ends in a real timeout.
"""

from __future__ import annotations

import pytest

from sparkdeck.guard import records
from sparkdeck.guard.readings import HostReadings
from sparkdeck.guard.records import recent_actions
from sparkdeck.guard.stopper import StopAttempt
from sparkdeck.guard.watchdog import engine_watchdog
from sparkdeck.runtime.client import DockerRuntime
from tests.conftest import scope_containers
from tests.support.busybox_engines import sleeper
from tests.support.hung_docker import hung_daemon  # noqa: F401 - a fixture
from tests.support.memory_hog import MemoryHog, guard_in_hog_reach

pytestmark = [pytest.mark.docker]
GIB = 2**30


def test_a_failed_stop_is_carried_through_by_the_next_watchdog_after_memory_came_back(
    runtime, docker_client, scope, tmp_path, busybox_image, hung_daemon
):
    engine = runtime.start(sleeper(tmp_path, busybox_image).container_spec())
    hung = DockerRuntime(hung_daemon, scope=scope, files_dir=tmp_path / "files")
    guard, hog_size = guard_in_hog_reach()

    first = engine_watchdog(guard, runtime, engine)
    real_stop, calls = first.stop, []

    def stop_failing_once() -> StopAttempt | None:
        calls.append(1)
        if len(calls) == 1:  # the daemon does not answer: a real read timeout
            hung.stop(engine.container_id, grace=0)
        return real_stop()

    first.stop = stop_failing_once
    with MemoryHog(hog_size) as hog:
        hog.allocate()
        decided = first.step()
    assert decided.level == "stop", decided.describe()
    assert first.stop_pending and len(calls) == 1
    assert first.attempts[0].text.startswith("stop failed: ")
    # The hog is gone: memory is back. The first watchdog's host ends here, its stop pending.
    assert HostReadings()().available_pct > guard.stop_available_pct
    assert [c.id for c in scope_containers(docker_client, scope)] == [engine.container_id]

    second = engine_watchdog(guard, runtime, engine)
    now = second.step()
    assert now.level != "stop", now.describe()  # its own reading says all is well...
    assert second.stopped_by is not None  # ...and the earlier decision is carried through
    assert "decided earlier" in second.stopped_by.reasons[0]
    assert str(guard.stop_available_pct)[:4] in second.stopped_by.reasons[0]
    assert scope_containers(docker_client, scope) == []
    assert records.pending_stop(engine.container_id) is None
    actions = [a["action"] for a in reversed(recent_actions())]
    assert actions == ["stopping", "stop failed", "stopped"], actions
    assert {a["container_id"] for a in recent_actions()} == {engine.container_id}
