"""A preset written from docs/presets.md works on the first try (issue 27, item 2), on the
real Docker daemon and llama-server build b11434 (the build the docs name):

- the default `memlock = -1`, where dockerd cannot grant it, is refused before the running
  engine is stopped and before the page cache is flushed (a probe container sees it);
- the default "no mmap" works with that build, which refuses `--no-mmap`.
"""

from __future__ import annotations

import threading
import time
from typing import Any

import httpx
import pytest

from sparkdeck.host.meminfo import read_meminfo
from sparkdeck.host.pagecache import FlushReport
from sparkdeck.launch.failure import last_failure
from sparkdeck.launch.preflight import PreflightFailed
from sparkdeck.launch.sequence import Launcher
from sparkdeck.presets import load_file
from sparkdeck.runtime.client import DockerRuntime
from tests.conftest import (
    busybox_preset,
    free_port,
    host_memlock,
    llama_preset_fields,
    scope_containers,
    unavailable,
    write_preset,
)

pytestmark = [pytest.mark.docker, pytest.mark.llama]
SERVING = "exec httpd -f -p 8080 -h /www"


def skip_wait() -> threading.Event:
    skip = threading.Event()
    skip.set()  # not about the memory wait
    return skip


def test_a_memlock_dockerd_cannot_grant_is_refused_before_the_stop_and_the_flush(
    runtime: DockerRuntime, docker_client, scope, tmp_path, busybox_image, llama_image
):
    if host_memlock() == -1:
        unavailable("this host's dockerd may lock unlimited memory: nothing to refuse")
    first = Launcher(runtime, stop_grace=5).launch(
        busybox_preset(tmp_path, "running", busybox_image, SERVING),
        flush=False,
        skip_switch_wait=skip_wait(),
    )
    flushes: list[str] = []

    def flush() -> FlushReport:  # would drop this machine's page cache: recorded instead
        flushes.append("flush")
        snapshot = read_meminfo()
        return FlushReport("test", snapshot, snapshot, 0.0)

    fields = llama_preset_fields(llama_image, free_port())
    del fields["memlock"]  # as docs/presets.md writes it: the default, -1
    preset = load_file(write_preset(tmp_path / "presets", "from-docs", **fields))
    assert preset.memlock == -1
    events: list[Any] = []
    began = time.time()  # a float: Docker takes fractions of a second
    with pytest.raises(PreflightFailed) as info:
        Launcher(runtime, on_event=events.append, flush=flush, stop_grace=5).launch(
            preset, flush=True, skip_switch_wait=skip_wait()
        )
    assert "locked memory (memlock)" in str(info.value)
    assert "before anything was stopped or flushed" in str(info.value)
    assert flushes == []  # the page cache was kept
    assert not any(type(e).__name__ == "PreviousStopping" for e in events)
    alive = [c.id for c in scope_containers(docker_client, scope) if c.status == "running"]
    assert alive == [first.container_id]  # the running engine still serves
    assert last_failure() is None  # nothing was touched: nothing to dismiss
    # the probe (labelled with this scope: other workers' launches probe the same daemon)
    # left nothing behind
    probes = {"label": ["io.sparkdeck.probe", f"io.sparkdeck.scope={scope}"]}
    assert docker_client.containers.list(all=True, filters=probes) == []
    seen = docker_client.events(
        since=began,
        until=int(time.time()) + 1,
        decode=True,
        filters={**probes, "type": "container"},
    )
    actions = [event["Action"] for event in seen]
    assert actions.count("create") == 1 and actions.count("destroy") == 1, actions


def test_the_default_no_mmap_works_with_the_documented_build(
    runtime: DockerRuntime, tmp_path, llama_image
):
    fields = llama_preset_fields(llama_image, free_port())
    del fields["llamacpp"]["no_mmap_flag"]  # the default, as docs/presets.md writes a preset
    preset = load_file(write_preset(tmp_path / "presets", "no-mmap-default", **fields))
    assert preset.options["no_mmap"] is True
    ready = Launcher(runtime, stop_grace=5).launch(
        preset, flush=False, skip_switch_wait=skip_wait()
    )
    assert httpx.get(ready.base_url + "/health", timeout=10).status_code == 200
    assert "--no-mmap" not in ready_command(preset)  # refused by this build
    env = dict(preset.container_spec().env)  # each build reads its own spelling
    assert env["LLAMA_ARG_LOAD_MODE"] == "none" and env["LLAMA_ARG_NO_MMAP"] == "1"


def ready_command(preset: Any) -> list[str]:
    return list(preset.container_spec().command)
