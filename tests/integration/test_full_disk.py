"""A full data disk loses nothing that matters (issue 31, item 6).

The data dir is a real 1 MiB tmpfs, filled with a file until the kernel says ENOSPC (root
only: elsewhere the tests skip through tests.conftest.unavailable). The guard's decision is
kept by the service and shown in `sparkdeck service status` until it can be written, then
written; JSONL appends never leave a torn line that swallows the next; `chat --save` says
the disk is full in one line and leaves no file.
"""

from __future__ import annotations

import errno
import json
import os
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import unavailable
from tests.support.cli import run_cli


def fill(directory: Path) -> Path:
    """Write a file in `directory` until the filesystem has no block left; its path."""
    filler = directory / "filler"
    with open(filler, "wb", buffering=0) as out:
        try:
            while True:
                out.write(b"\0" * 4096)
        except OSError as exc:
            assert exc.errno == errno.ENOSPC, exc
    return filler


@pytest.fixture
def small_data_dir(isolated_dirs) -> Iterator[Path]:
    """The test's data dir on a 1 MiB tmpfs of its own, unmounted afterwards."""
    data = isolated_dirs["data"]
    data.mkdir(parents=True, exist_ok=True)
    if os.geteuid() != 0:
        unavailable("a tmpfs data dir needs root (mount)")
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=1m,mode=0700", "tmpfs", str(data)],
        capture_output=True,
        text=True,
        check=False,
    )
    if mounted.returncode != 0:
        unavailable(f"cannot mount a tmpfs here: {mounted.stderr.strip()}")
    try:
        yield data
    finally:
        if subprocess.run(["umount", str(data)], check=False).returncode != 0:
            subprocess.run(["umount", "-l", str(data)], check=False)  # a process kept it busy


# ----- the service keeps the guard's decision until the disk has room ----------------------


@pytest.mark.docker
def test_a_guard_stop_on_a_full_disk_is_shown_by_service_status_and_written_when_room_returns(
    small_data_dir, isolated_dirs, runtime, scope, docker_client, tmp_path, busybox_image
):
    from tests.support.busybox_engines import sleeper
    from tests.support.cli import wait_for
    from tests.support.memory_hog import MemoryHog, guard_in_hog_reach
    from tests.support.service_env import client_for

    guard, hog_size = guard_in_hog_reach()
    isolated_dirs["config"].mkdir(parents=True, exist_ok=True)
    (isolated_dirs["config"] / "settings.toml").write_text(
        f"[guard]\nstop_available_pct = {guard.stop_available_pct:.2f}\n"
        f"warn_available_pct = {guard.warn_available_pct:.2f}\n"
    )
    env = {**os.environ, "SPARKDECK_SCOPE": scope, "SPARKDECK_SERVICE": "auto"}
    started = run_cli("service", "start", env=env)
    assert started.returncode == 0, started.stderr
    try:
        engine = runtime.start(sleeper(tmp_path, busybox_image).container_spec())
        with client_for(env) as client:
            wait_for(
                lambda: client.status()["guard"]["guarding"] == engine.name,
                30,
                "the service guarding the engine",
            )
            filler = fill(small_data_dir)
            with MemoryHog(hog_size) as hog:
                hog.allocate()
                stop = wait_for(
                    lambda: (
                        (client.status()["guard"].get("last_stop") or {}).get("done")
                        and client.status()["guard"]
                    ),
                    30,
                    "the guard's stop",
                )
        assert (
            docker_client.containers.list(all=True, filters={"label": f"sparkdeck.scope={scope}"})
            == []
        )
        # (a "warned" record may come first: the hog crossed the warn band on its way down)
        held = [h for h in stop["unwritten"] if h["action"] != "warned"]
        assert [h["action"] for h in held] == ["stopping", "stopped"], stop["unwritten"]
        assert "No space left on device" in stop["unwritten"][0]["not_written"]

        status = run_cli("service", "status", env=env)
        lines = status.stdout.splitlines()
        said = next(line for line in lines if line.startswith("stop:"))
        assert f"the guard stopped {engine.preset_id}: MemAvailable" in said, status.stdout
        assert said.endswith(", not written yet)"), said
        unwritten = [
            line for line in lines if line.startswith("unwritten:") and " warned " not in line
        ]
        assert len(unwritten) == 2 and " stopping " in unwritten[0], status.stdout
        assert " stopped " in unwritten[1] and "kept in memory" in unwritten[1]
        # nothing of the stop is on disk yet (a "warned" record may be: a host already in
        # the warn band before the disk filled, other work holding memory, writes it then)
        history = run_cli("guard", "--history", "--json", env=env)
        actions = [json.loads(line)["action"] for line in history.stdout.splitlines()]
        assert set(actions) <= {"warned"}, history.stdout

        filler.unlink()  # room again: the next status (or the follower's loop) writes them
        with client_for(env) as client:
            wait_for(
                lambda: not client.status()["guard"]["unwritten"], 10, "the held records written"
            )
        status = run_cli("service", "status", env=env)
        assert "unwritten:" not in status.stdout
        said = next(line for line in status.stdout.splitlines() if line.startswith("stop:"))
        assert "record: " + str(small_data_dir / "guard-actions") in said
        assert not said.endswith("not written yet)"), said
        history = run_cli("guard", "--history", "--json", env=env)
        rows = [
            row for row in map(json.loads, history.stdout.splitlines()) if row["action"] != "warned"
        ]
        assert [r["action"] for r in rows] == ["stopped", "stopping"], history.stdout
        assert {r["container_id"] for r in rows} == {engine.container_id}
        assert rows[1]["decision"]["level"] == "stop"
    finally:
        run_cli("service", "stop", env=env)
        time.sleep(0.2)


# ----- JSON lines: whole or not at all ------------------------------------------------------


def record(n: int, pad: int = 0):
    from sparkdeck.endpoint.request_log import RequestRecord

    return RequestRecord(
        time=1000.0 + n,
        client="127.0.0.1:" + "9" * pad,
        path="/v1/chat",
        model="m",
        status=200,
        stream=False,
        prompt_tokens=n,
    )


def test_a_request_line_the_full_disk_cut_short_is_cut_back_and_the_next_one_lands_whole(
    small_data_dir,
):
    from sparkdeck.endpoint.request_log import RequestLog

    log = RequestLog(small_data_dir / "requests.jsonl")
    line = len(json.dumps(record(1).to_dict(), separators=(",", ":"))) + 1
    # the first line ends 40 bytes short of a page: the second finds room for 40 bytes of
    # itself in that page and none after it (tmpfs gives space a page at a time)
    log.append(record(1, pad=4096 - 40 - line))
    assert log.path.stat().st_size == 4096 - 40
    filler = fill(small_data_dir)
    written = log.append(record(2))
    assert log.path.stat().st_size == 4096 - 40  # kept out whole: a short write is cut back
    assert written is False and log.unwritten == 1
    assert "No space left" in (log.last_error or "")
    filler.unlink()
    assert log.append(record(3))
    raw = log.path.read_bytes()
    assert raw.endswith(b"\n") and all(json.loads(x) for x in raw.splitlines())
    assert [row["prompt_tokens"] for row in log.read()] == [1, 3]


def test_a_torn_tail_left_by_a_crash_costs_only_itself(small_data_dir):
    from sparkdeck.endpoint.request_log import RequestLog

    log = RequestLog(small_data_dir / "requests.jsonl")
    log.append(record(1))
    with open(log.path, "ab") as out:  # a writer killed mid-line (an older version, a crash)
        out.write(b'{"time": 1002.0, "client": "torn')
    log.append(record(3))
    assert [row["prompt_tokens"] for row in log.read()] == [1, 3]


def test_chat_save_on_a_full_disk_says_so_in_one_line_and_leaves_no_file(small_data_dir):
    from tests.support.openai_loopback import LoopbackOpenAI, Scripted, sse_events

    SSE = Path(__file__).parents[1] / "fixtures" / "sse"  # recorded streams
    fill(small_data_dir)
    with LoopbackOpenAI(models=("qwen3",)) as server:
        server.answer(
            Scripted(
                sse_events((SSE / "vllm_new_reasoning.sse").read_text(encoding="utf-8")),
                pause=0.005,
            )
        )
        chat = run_cli("chat", "hi", "--save", "--endpoint", server.url, "--kind", "vllm")
    assert chat.returncode == 1, chat.stderr
    assert "Traceback" not in chat.stderr
    (said,) = chat.stderr.strip().splitlines()
    assert "the disk is full" in said and "nothing was saved" in said, said
    conversations = small_data_dir / "conversations"
    assert not conversations.exists() or list(conversations.iterdir()) == []


def test_a_conversation_reply_the_disk_cannot_take_leaves_whole_lines_only(small_data_dir):
    from sparkdeck.chat.store import ConversationError, ConversationWriter, load

    writer = ConversationWriter.create({"model": "m"}, small_data_dir / "c")
    writer.user("x" * (4096 - 40 - writer.path.stat().st_size - 60))
    size = writer.path.stat().st_size
    assert 4096 - 120 < size < 4096
    filler = fill(small_data_dir)
    with pytest.raises(ConversationError) as failed:
        writer.reply_started("m", {})
    assert writer.path.stat().st_size == size  # nothing of the line that did not fit
    assert "the disk is full" in str(failed.value)
    filler.unlink()
    writer.user("after")
    writer.close()
    conversation = load(writer.path)
    assert conversation.skipped_lines == 0
    assert [t.content[:5] for t in conversation.turns] == ["xxxxx", "after"]
