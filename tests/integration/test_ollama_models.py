"""Ollama's model pull at launch: the protocol against a FAKE Ollama on loopback (the real
image cannot be pulled here; see tests/support/ollama_loopback.py), and the launcher's use of
it with a real busybox container on the real Docker daemon."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from sparkdeck.engines import get_kind
from sparkdeck.engines.ollama_models import model_present, pull_model
from sparkdeck.launch.sequence import EngineReady, Launcher, ModelPullStarted
from sparkdeck.presets import load_file
from sparkdeck.runtime.errors import ModelPullError
from sparkdeck.runtime.pull import PullProgress, PullTracker
from tests.conftest import write_preset
from tests.support.ollama_loopback import BLOBS, FakeOllama


def ollama_preset(tmp_path: Path, model: str | None = "qwen3:8b"):
    fields = {"title": "o", "kind": "ollama", "image": "ollama/ollama:0.12.3"}
    if model:
        fields["model"] = model
    return load_file(write_preset(tmp_path, "o", **fields))


def test_a_model_the_server_holds_needs_no_pull(tmp_path: Path) -> None:
    with FakeOllama(models={"qwen3:8b"}) as ollama:
        assert model_present(ollama.url, "qwen3:8b")
        assert get_kind("ollama").missing_model(ollama.url, ollama_preset(tmp_path)) is None
        assert not model_present(ollama.url, "llama3.2:1b")
    assert ollama.calls == [("/api/show", "qwen3:8b")] * 2 + [("/api/show", "llama3.2:1b")]


def test_a_preset_without_a_model_asks_nothing(tmp_path: Path) -> None:
    # no server at all behind this address: a request would fail the test
    assert (
        get_kind("ollama").missing_model("http://127.0.0.1:9", ollama_preset(tmp_path, None))
        is None
    )


def test_pull_reports_every_blob_and_ends_at_success(tmp_path: Path) -> None:
    events: list[PullProgress] = []
    with FakeOllama() as ollama:
        kind = get_kind("ollama")
        assert kind.missing_model(ollama.url, ollama_preset(tmp_path)) == "qwen3:8b"
        kind.pull_model(ollama.url, "qwen3:8b", events.append)
        assert model_present(ollama.url, "qwen3:8b")
    tracker = PullTracker()
    fractions = []
    for event in events:
        tracker.update(event)
        fractions.append(tracker.fraction)
    assert events[0].status == "pulling manifest" and events[-1].status == "success"
    assert {e.layer for e in events if e.layer} == set(BLOBS)
    assert all(e.image == "qwen3:8b" for e in events)
    known = [f for f in fractions if f is not None]
    assert known[:3] == [0.0, 0.5, 1.0]  # the weights blob, in its steps
    assert all(f > 0.999 for f in known[3:]) and known[-1] == 1.0  # small blobs after it
    assert tracker.layers_done == len(BLOBS)


def test_ollamas_own_error_is_the_message() -> None:
    with FakeOllama(unknown={"no-such-model"}) as ollama:
        with pytest.raises(ModelPullError, match="pull model manifest: file does not exist"):
            pull_model(ollama.url, "no-such-model", lambda event: None)


def test_a_stream_that_stops_before_success_is_a_failure() -> None:
    with FakeOllama(finish_pull=False) as ollama:
        with pytest.raises(ModelPullError, match='ended without "success"'):
            pull_model(ollama.url, "qwen3:8b", lambda event: None)


def test_cancel_closes_the_pull() -> None:
    cancel = threading.Event()
    seen: list[PullProgress] = []

    def on_progress(event: PullProgress) -> None:
        seen.append(event)
        cancel.set()  # the user pressed cancel after the first line

    with FakeOllama(pause=0.05) as ollama:
        with pytest.raises(ModelPullError, match="cancelled"):
            pull_model(ollama.url, "qwen3:8b", on_progress, cancel)
    assert len(seen) == 1


def test_an_unreachable_server_says_where(tmp_path: Path) -> None:
    with pytest.raises(ModelPullError, match=r"cannot ask Ollama at http://127\.0\.0\.1:9"):
        model_present("http://127.0.0.1:9", "qwen3:8b")


@pytest.mark.docker
def test_launcher_pulls_the_model_before_ready_and_cleans_up_when_it_fails(
    runtime, docker_client, scope, tmp_path, busybox_image, monkeypatch
):
    """A real busybox container stands in for the engine (it answers its health path); the
    model store is the FAKE Ollama, reached through the engine kind's two hooks."""
    from tests.conftest import scope_containers
    from tests.support.busybox_engines import web

    with FakeOllama(unknown={"missing"}) as ollama:
        kind = type(get_kind("openai"))
        wanted = {"model": "qwen3:8b"}
        monkeypatch.setattr(
            kind,
            "missing_model",
            lambda self, url, preset: (
                None if model_present(ollama.url, wanted["model"]) else wanted["model"]
            ),
        )
        monkeypatch.setattr(
            kind,
            "pull_model",
            lambda self, url, model, on_progress, cancel=None: pull_model(
                ollama.url, model, on_progress, cancel
            ),
        )
        events: list = []
        launcher = Launcher(runtime, on_event=events.append, stop_grace=1)
        ready = launcher.launch(web(tmp_path, busybox_image), flush=False)
        kinds = [type(e) for e in events]
        assert kinds.index(ModelPullStarted) < kinds.index(EngineReady)
        pulled = [e for e in events if isinstance(e, PullProgress)]
        assert pulled[-1].status == "success"
        assert ready.docker_state == "running"

        # the next launch finds the model there: no pull
        events.clear()
        launcher.launch(web(tmp_path, busybox_image, "web2"), flush=False)
        assert not [e for e in events if isinstance(e, ModelPullStarted)]

        # a model the registry does not have: the launch fails and leaves no container
        wanted["model"] = "missing"
        with pytest.raises(ModelPullError, match="file does not exist"):
            launcher.launch(web(tmp_path, busybox_image, "web3"), flush=False)
        assert scope_containers(docker_client, scope) == []
