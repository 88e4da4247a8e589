"""What the chat tab talks to: sparkdeck's ready engine, else the one attached engine.

With no Docker daemon at all (the app's Docker factory raises), an engine attached with
`sparkdeck attach` (here a real OpenAI-compatible server on loopback) is chatted with from
the TUI; several attached engines, or one that does not answer, are explained instead.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from textual.widgets import Input

from sparkdeck.endpoints import AttachedRegistry, Endpoint
from sparkdeck.ui.chat.views import ReplyView
from sparkdeck.ui.readers import NO_ENGINE, chat_target
from tests.support.offline_app import make_app, text_of
from tests.support.openai_loopback import LoopbackOpenAI, Scripted, chunk_event
from tests.support.pane_host import mounted_chat_pane, wait_until

SIZE = (120, 40)


def attach(name: str, url: str) -> Endpoint:
    endpoint = Endpoint(name, url, "openai", "/v1/models", None, "attached")
    AttachedRegistry().add(endpoint)
    return endpoint


def test_without_engines_the_tab_says_how_to_get_one() -> None:
    assert chat_target(None, lambda url: True).endpoint is None
    assert chat_target(None, lambda url: True).note == NO_ENGINE


def test_one_attached_engine_is_chosen_only_when_it_answers() -> None:
    attach("atlas", "http://127.0.0.1:9")
    asked: list[str] = []
    answering = chat_target(None, lambda url: asked.append(url) or True)
    assert answering.endpoint is not None and answering.endpoint.name == "atlas"
    assert asked == ["http://127.0.0.1:9/v1/models"]
    silent = chat_target(None, lambda url: False)
    assert silent.endpoint is None and "does not answer /v1/models" in silent.note


def test_several_attached_engines_are_named_not_guessed() -> None:
    attach("a", "http://127.0.0.1:9")
    attach("b", "http://127.0.0.1:10")
    target = chat_target(None, lambda url: True)
    assert target.endpoint is None
    assert "several engines are attached" in target.note
    assert "b (http://127.0.0.1:10)" in target.note


def test_a_broken_registry_is_reported_with_its_file() -> None:
    registry = AttachedRegistry()
    registry.path.parent.mkdir(parents=True, exist_ok=True)
    registry.path.write_text("[[engine]\nname = ")
    target = chat_target(None, lambda url: True)
    assert target.endpoint is None and str(registry.path) in target.note


@pytest.mark.anyio
async def test_the_tui_chats_with_an_attached_engine_without_docker(tmp_path: Path) -> None:
    with LoopbackOpenAI(models=("atlas-7b",)) as server:
        attach("atlas", server.url)
        server.answer(
            Scripted([chunk_event("Hello "), chunk_event("from atlas."), b"data: [DONE]\n\n"])
        )
        app, _ = make_app(tmp_path, engine_poll_seconds=0.5)

        async def scenario() -> None:
            async with app.run_test(size=SIZE) as pilot:
                await pilot.press("c")
                pane = await mounted_chat_pane(pilot, app)
                assert pane.base_url == server.url
                assert not app.chat_tab.query_one("#chat-none").display
                prompt = pane.query_one("#chat-input", Input)
                prompt.value = "hi"
                await pilot.press("enter")
                await wait_until(
                    pilot,
                    lambda: (
                        not pane.streaming
                        and pane.query(ReplyView)
                        and "from atlas" in pane.query(ReplyView).last().content_text
                    ),
                    timeout=10.0,
                    what="the reply",
                )
                request = server.next_request()
                assert request["body"]["model"] == "atlas-7b"
                assert request["body"]["messages"][-1] == {"role": "user", "content": "hi"}

                # detached: the pane goes, and the tab says what to do instead
                AttachedRegistry().remove("atlas")
                await wait_until(
                    pilot, lambda: app.chat_tab.pane is None, timeout=10.0, what="the pane to go"
                )
                assert "attach one" in text_of(app.chat_tab.query_one("#chat-none"))

        await scenario()
