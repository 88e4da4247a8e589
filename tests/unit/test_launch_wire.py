"""Launch events across the service's socket are the same typed values on both sides.

One event of every type, built from this machine's real readings where a reading is what it
holds (/proc/meminfo, /proc/pressure/memory, the watchdog policy's real decision), goes
through to_dict, JSON and from_dict, and must come back equal, with the same sentence and
the same listener hook. A new event type without a sample here fails the coverage check.
"""

from __future__ import annotations

import json
import typing
from pathlib import Path

import pytest

from sparkdeck.config.settings import GuardSettings
from sparkdeck.guard.claims import share_claim
from sparkdeck.guard.fit import check_fit
from sparkdeck.guard.policy import WatchdogPolicy
from sparkdeck.guard.readings import HostReadings
from sparkdeck.guard.switch import SwitchProgress
from sparkdeck.guard.timeline import PhaseMark, StartupTimeline, TimelinePoint
from sparkdeck.host.meminfo import read_meminfo
from sparkdeck.host.pagecache import FlushReport
from sparkdeck.launch import events as ev
from sparkdeck.launch.events import LaunchEvent, event_from_dict, event_to_dict
from sparkdeck.launch.listener import LaunchListener
from sparkdeck.launch.wire import WireError
from sparkdeck.models.pull import PullProgress as DownloadProgress
from sparkdeck.runtime.pull import PullProgress
from sparkdeck.runtime.state import EngineState

ENGINE = EngineState(
    container_id="c0ffee",
    name="sparkdeck-tiny",
    preset_id="tiny",
    kind="llamacpp",
    image="local/llama:b11434",
    model="/models/tiny.gguf",
    base_url="http://127.0.0.1:18080",
    health_path="/health",
    metrics_path=None,
    spec_hash="abc",
    docker_state="running",
    exit_code=None,
    started_at="2026-12-03T15:00:00Z",
    log_tail=("line 1", "line <2>"),
    image_id="sha256:1234",
    argv=("llama-server", "-c", "2048"),
    published_on="127.0.0.1",
)


def samples() -> list[LaunchEvent]:
    memory = read_meminfo()
    readings = HostReadings()
    window = [readings(), readings()]
    decision = WatchdogPolicy(GuardSettings()).decide(window, 0.5)
    fit = check_fit(
        share_claim(0.5, memory.total, "--gpu-memory-utilization"),
        memory,
        headroom=2**30,
        returning=3 * 2**30,
        returning_from=("old",),
    )
    switch = SwitchProgress(
        "waiting", 1.5, 60.0, memory.available - 1, memory.available, None, (41, 42)
    )
    timeline = StartupTimeline(
        (
            TimelinePoint(0.0, memory.available, memory.used),
            TimelinePoint(0.5, memory.available - 5, memory.used + 5),
        ),
        (PhaseMark(0.0, "starting", "container started"),),
        memory.total,
    )
    return [
        ev.PullStarted("local/llama:b11434"),
        ev.ModelPullStarted("tiny:latest"),
        PullProgress("local/llama:b11434", "layer1", "Downloading", 10, None),
        ev.FitChecked(fit, forced=True),
        ev.ModelInCache("org/tiny", 123_456, note="the Hub was not asked"),
        ev.ModelDownloadStarted("org/tiny", "f" * 40, 3, 1000, 2000),
        ev.ModelDownloading(
            "org/tiny", DownloadProgress("model.gguf", 5, 10, 500, 2000, 1e6, None)
        ),
        ev.ModelDownloaded("org/tiny", 1000, 2.5),
        ev.PreviousStopping(ENGINE, grace=12.0, at=1234.5),
        ev.RepliesAwaited(2, 60.0),
        ev.RepliesAwaited(1, 60.0, 60.02, done=True),
        ev.PreviousStopped(ENGINE, 3.25),
        ev.SwitchWaited("old", switch),
        ev.CacheFlushed(FlushReport("root", memory, read_meminfo(), 0.4)),
        ev.FlushSkipped("flush turned off"),
        ev.ContainerStarted(ENGINE),
        ev.GuardDecided(decision),
        ev.GuardFailed("no /proc/meminfo"),
        ev.TimelineSaved(timeline, Path("/tmp/launches/tiny.json")),
        ev.EngineReady(ENGINE, 0.35),
        ev.CleanupStopping(ENGINE, 30.0),
        ev.CleanupHurried(ENGINE),
    ]


class Recorder(LaunchListener):
    def __init__(self) -> None:
        self.hooks: list[str] = []

    def __getattribute__(self, name: str):  # records which hook an event delivered to
        attr = object.__getattribute__(self, name)
        if callable(attr) and not name.startswith("_") and name != "other":
            return lambda event: object.__getattribute__(self, "hooks").append(name)
        return attr


def hook_of(event: LaunchEvent) -> list[str]:
    recorder = Recorder()
    event.deliver(recorder)
    return recorder.hooks


def test_every_event_type_has_a_sample() -> None:
    kinds = {cls.__name__ for cls in typing.get_args(LaunchEvent)}
    assert {type(e).__name__ for e in samples()} == kinds


@pytest.mark.parametrize("event", samples(), ids=lambda e: type(e).__name__)
def test_an_event_comes_back_as_itself(event: LaunchEvent) -> None:
    sent = json.loads(json.dumps(event_to_dict(event)))  # what crosses the socket
    assert sent["type"] == type(event).__name__
    back = event_from_dict(sent)
    assert type(back) is type(event)
    assert back == event  # every field, nested snapshots included, with their types
    assert back.describe() == event.describe() and back.phase == event.phase
    assert hook_of(back) == hook_of(event) != []


def test_an_event_of_another_version_is_a_clear_error() -> None:
    with pytest.raises(WireError, match="not a launch event this sparkdeck knows"):
        event_from_dict({"type": "EngineExploded", "engine": {}})
    with pytest.raises(WireError, match="a ContainerStarted event this sparkdeck cannot read"):
        event_from_dict({"type": "ContainerStarted", "engine": {"name": "x"}})
