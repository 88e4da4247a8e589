"""Runtime details on the real daemon: readiness timeout, grace period, mounts, log streams."""

from __future__ import annotations

import threading
import time

import pytest

from sparkdeck.launch.events import CleanupStopping, ContainerStarted
from sparkdeck.launch.sequence import Launcher
from sparkdeck.runtime.errors import ReadinessTimeout
from sparkdeck.runtime.logs import LogFollower
from sparkdeck.runtime.pull import PullProgress, PullTracker
from sparkdeck.runtime.spec import ContainerSpec, GeneratedFile
from tests.conftest import busybox_preset, scope_containers

pytestmark = [pytest.mark.docker]


def test_readiness_timeout_leaves_nothing_behind(
    runtime, docker_client, scope, tmp_path, busybox_image
):
    preset = busybox_preset(tmp_path, "silent", busybox_image, "echo loading; sleep 60")
    seen: dict[str, float] = {}

    def note(event: object) -> None:  # when the readiness wait began and when it gave up
        if isinstance(event, (ContainerStarted, CleanupStopping)):
            seen.setdefault(type(event).__name__, time.monotonic())

    with pytest.raises(ReadinessTimeout) as info:
        Launcher(runtime, on_event=note, stop_grace=1).launch(preset, flush=False, timeout=2)
    # the wait itself gives up at its 2 s, plus at most one poll (a Docker reload and a
    # refused health request, slower on a loaded host); Docker's create and removal are
    # not part of that promise
    waited = seen["CleanupStopping"] - seen["ContainerStarted"]
    assert 2.0 <= waited < 3.0, waited
    assert "did not answer /index.html with 200 within 2 s" in str(info.value)
    assert "loading" in info.value.log_tail
    assert scope_containers(docker_client, scope) == []


def test_ready_when_health_answers_200(runtime, docker_client, scope, tmp_path, busybox_image):
    # busybox httpd serves /www; it starts after a delay, like an engine loading weights
    preset = busybox_preset(
        tmp_path, "web", busybox_image, "sleep 1; exec httpd -f -p 8080 -h /www"
    )
    started = time.monotonic()
    engine = Launcher(runtime).launch(preset, flush=False, timeout=20)
    assert 1.0 <= time.monotonic() - started < 10
    assert engine.alive and engine.health_path == "/index.html"


def test_stop_waits_the_grace_period_then_kills(
    runtime, docker_client, scope, tmp_path, busybox_image
):
    # PID 1 that ignores SIGTERM: only SIGKILL after the grace period ends it
    preset = busybox_preset(
        tmp_path, "stubborn", busybox_image, "trap '' TERM; while true; do sleep 1; done"
    )
    engine = runtime.start(preset.container_spec())
    started = time.monotonic()
    runtime.stop(engine.container_id, grace=2)
    elapsed = time.monotonic() - started
    assert 2.0 <= elapsed < 8, elapsed
    assert scope_containers(docker_client, scope) == []


def test_hf_cache_and_generated_files_are_mounted(
    runtime, docker_client, scope, tmp_path, busybox_image, monkeypatch
):
    hf_home = tmp_path / "hf"
    monkeypatch.setenv("HF_HOME", str(hf_home))
    preset = busybox_preset(tmp_path, "mounts", busybox_image, "sleep 60", hf_cache=True)
    base = preset.container_spec()
    spec = ContainerSpec(
        **{
            **base.__dict__,
            "files": (GeneratedFile("/etc/sparkdeck/options.yaml", "kv_cache_config:\n  x: 1\n"),),
        }
    )
    engine = runtime.start(spec)
    container = docker_client.containers.get(engine.container_id)
    mounts = {m["Destination"]: m for m in container.attrs["Mounts"]}
    assert mounts["/root/.cache/huggingface"]["Source"] == str(hf_home)
    assert mounts["/etc/sparkdeck/options.yaml"]["RW"] is False
    code, out = container.exec_run(["cat", "/etc/sparkdeck/options.yaml"])
    assert code == 0 and out.decode() == "kv_cache_config:\n  x: 1\n"
    runtime.stop(engine.container_id, grace=0)
    assert not (runtime.files_dir / engine.name).exists()  # generated files go with it


def test_a_single_file_and_a_missing_directory_can_be_mounted(
    runtime, docker_client, tmp_path, busybox_image
):
    # a chat template or a config file is often mounted alone; a missing source becomes a dir
    template = tmp_path / "template.jinja"
    template.write_text("{{ messages }}")
    missing = tmp_path / "not-yet" / "models"
    preset = busybox_preset(
        tmp_path,
        "filemount",
        busybox_image,
        "sleep 60",
        volumes=[f"{template}:/templates/chat.jinja:ro", f"{missing}:/models"],
    )
    engine = runtime.start(preset.container_spec())
    container = docker_client.containers.get(engine.container_id)
    code, out = container.exec_run(["cat", "/templates/chat.jinja"])
    assert code == 0 and out.decode() == "{{ messages }}"
    assert missing.is_dir()
    runtime.stop(engine.container_id, grace=0)


def test_follow_logs_streams_until_exit(runtime, tmp_path, busybox_image):
    preset = busybox_preset(
        tmp_path,
        "talker",
        busybox_image,
        "for i in 1 2 3; do echo step $i; sleep 0.3; done; exit 0",
    )
    engine = runtime.start(preset.container_spec())
    lines = list(runtime.follow_logs(engine.container_id, tail=10, follow=True))
    assert lines == ["step 1", "step 2", "step 3"]


def test_pull_tracker_adds_layers_up():
    tracker = PullTracker()
    events = [
        PullProgress("img", None, "Pulling from x", None, None),
        PullProgress("img", "a", "Downloading", 50, 100),
        PullProgress("img", "b", "Downloading", 0, 300),
    ]
    for e in events:
        tracker.update(e)
    assert tracker.fraction == pytest.approx(50 / 400)
    tracker.update(PullProgress("img", "a", "Pull complete", None, None))
    tracker.update(PullProgress("img", "b", "Downloading", 150, 300))
    assert tracker.fraction == pytest.approx(250 / 400) and tracker.layers_done == 1


def test_pull_tracker_never_goes_back_while_a_layer_extracts():
    """Docker reports a download, then "Download complete", then extraction progress that
    counts the same layer's bytes from 0 again (as the daemon streams it)."""
    tracker = PullTracker()
    tracker.update(PullProgress("img", "a", "Downloading", 0, 200))
    tracker.update(PullProgress("img", "b", "Downloading", 100, 200))
    tracker.update(PullProgress("img", "a", "Downloading", 200, 200))
    assert tracker.fraction == pytest.approx(300 / 400)
    tracker.update(PullProgress("img", "a", "Download complete", None, None))
    tracker.update(PullProgress("img", "a", "Extracting", 10, 200))
    assert tracker.fraction == pytest.approx(300 / 400)
    tracker.update(PullProgress("img", "a", "Pull complete", None, None))
    assert tracker.layers_done == 1


def test_following_a_created_container_waits_for_its_start(runtime, docker_client, busybox_image):
    """Docker ends a log follow of a container that is created but not started at once,
    with no line. A window follows a new engine when Docker says it was created; under
    load the start came later and the log pane stayed empty for the engine's whole life
    (a parallel CI run). The follower follows again once the container runs."""
    container = docker_client.containers.create(
        busybox_image, ["sh", "-c", "echo first; sleep 0.3; echo second"]
    )
    try:
        follower = LogFollower(lambda: runtime, container.id, tail=10)
        starter = threading.Timer(1.0, container.start)
        starter.start()
        began = time.monotonic()
        lines = [line for batch in follower.batches() for line in batch]
        starter.join()
        assert lines == ["first", "second"]
        assert time.monotonic() - began < 5.0
    finally:
        container.remove(force=True)


def test_a_created_container_removed_before_its_start_ends_the_follow(
    runtime, docker_client, busybox_image
):
    """The follower's wait for a start ends when the container goes instead."""
    container = docker_client.containers.create(busybox_image, ["true"])
    remover = threading.Timer(0.6, container.remove, kwargs={"force": True})
    remover.start()
    began = time.monotonic()
    assert list(LogFollower(lambda: runtime, container.id, tail=10).batches()) == []
    remover.join()
    assert time.monotonic() - began < 3.0


def test_a_created_container_that_ran_and_ended_before_the_look_still_gives_its_log(
    runtime, docker_client, busybox_image
):
    """Opened while created, and started and ended before the follower looked again: its
    whole log still comes (a follow of an ended container gives the tail and ends)."""
    container = docker_client.containers.create(busybox_image, ["echo", "quick"])
    try:
        follower = LogFollower(lambda: runtime, container.id, tail=10)
        batches = follower.batches()
        real_state = follower._state

        def started_and_ended(c: object) -> str | None:
            container.start()
            container.wait(timeout=10)
            return real_state(c)

        follower._state = started_and_ended  # type: ignore[method-assign]
        assert [line for batch in batches for line in batch] == ["quick"]
    finally:
        container.remove(force=True)
