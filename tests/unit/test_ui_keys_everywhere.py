"""Every dashboard key the help lists works from every side tab, the chat tab included.

The chat pane is real: an engine attached on loopback (a real OpenAI-compatible HTTP server),
so the pane mounts and its input takes the focus as it does for a user. In the input the
one-letter keys type text (that is what an input is for); Esc gives them back to the
dashboard, cancelling a streaming reply first. The footer names what Esc and Tab do there.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from textual.widgets import Input, TabbedContent

from sparkdeck.ui.app import SparkdeckApp
from sparkdeck.ui.bench.view import BenchCompareScreen
from sparkdeck.ui.screens.dialogs import HelpScreen
from tests.support.offline_app import make_app
from tests.support.openai_loopback import LoopbackOpenAI, Scripted, attach, chunk_event
from tests.support.pane_host import mounted_chat_pane, wait_until

SIZE = (120, 40)
TABS = {"m": "machine-tab", "e": "metrics-tab", "c": "chat-tab", "g": "guard-tab"}


def active_tab(app: SparkdeckApp) -> str:
    return app.query_one("#side-tabs", TabbedContent).active


def footer_keys(app: SparkdeckApp) -> dict[str, str]:
    """What the footer offers now: key -> description (the focused widget's bindings)."""
    return {
        binding.key: binding.description
        for _, binding, enabled, _ in app.active_bindings.values()
        if binding.show
    }


async def leave_chat_input(pilot, app: SparkdeckApp) -> None:
    """On the chat tab the input holds the keys: Esc hands them back."""
    if active_tab(app) == "chat-tab":
        await wait_until(pilot, lambda: isinstance(app.focused, Input), what="the chat input")
        await pilot.press("escape")
        await wait_until(
            pilot, lambda: not isinstance(app.focused, Input), what="Esc to leave the input"
        )


@pytest.mark.anyio
async def test_every_help_key_works_from_every_tab(tmp_path: Path) -> None:
    with LoopbackOpenAI(models=("atlas-7b",)) as server:
        attach(server.url)
        app, loader = make_app(tmp_path, engine_poll_seconds=0.5)

        async def press_and_check(
            pilot, key: str, check: Callable[[], bool], what: str, close: str | None = None
        ) -> None:
            await pilot.press(key)
            await wait_until(pilot, check, timeout=5.0, what=what)
            if close:
                await pilot.press(close)
                await wait_until(
                    pilot, lambda: app.screen is app.screen_stack[0], what=f"{what} to close"
                )

        async def scenario() -> None:
            async with app.run_test(size=SIZE) as pilot:
                await pilot.press("c")
                await mounted_chat_pane(pilot, app)
                await leave_chat_input(pilot, app)
                for tab_key, tab in TABS.items():
                    await pilot.press(tab_key)
                    await wait_until(pilot, lambda tab=tab: active_tab(app) == tab, what=tab)
                    await leave_chat_input(pilot, app)
                    for other_key, other in TABS.items():  # each tab key, then back
                        await press_and_check(
                            pilot,
                            other_key,
                            lambda other=other: active_tab(app) == other,
                            f"{other_key} from {tab}",
                        )
                        await leave_chat_input(pilot, app)
                        await pilot.press(tab_key)
                        await leave_chat_input(pilot, app)
                    theme = app.theme
                    await press_and_check(
                        pilot, "t", lambda theme=theme: app.theme != theme, f"t from {tab}"
                    )
                    loads = loader.calls
                    await press_and_check(
                        pilot, "r", lambda loads=loads: loader.calls > loads, f"r from {tab}"
                    )
                    await press_and_check(
                        pilot,
                        "question_mark",
                        lambda: isinstance(app.screen, HelpScreen),
                        f"? from {tab}",
                        close="escape",
                    )
                    await press_and_check(
                        pilot,
                        "b",
                        lambda: isinstance(app.screen, BenchCompareScreen),
                        f"b from {tab}",
                        close="escape",
                    )
                    # a new notification, by identity: counting them failed when an older
                    # one (the last tab's) expired in the same moment
                    seen = {note.identity for note in app._notifications}
                    await press_and_check(
                        pilot,
                        "l",  # no Docker here: the launch says so
                        lambda seen=seen: any(
                            note.identity not in seen for note in app._notifications
                        ),
                        f"l from {tab}",
                    )
                    assert active_tab(app) == tab
                await pilot.press("q")
                await wait_until(pilot, lambda: app.return_code is not None, what="q to quit")

        await scenario()


@pytest.mark.anyio
async def test_esc_cancels_a_streaming_reply_then_leaves_the_input(tmp_path: Path) -> None:
    with LoopbackOpenAI(models=("atlas-7b",)) as server:
        attach(server.url)
        # a reply that starts and then stalls: only Esc ends it
        server.answer(
            Scripted([chunk_event("thinking ")], pause=0.2, repeat_forever=chunk_event("more "))
        )
        app, _ = make_app(tmp_path, engine_poll_seconds=0.5)

        async def scenario() -> None:
            async with app.run_test(size=SIZE) as pilot:
                await pilot.press("c")
                pane = await mounted_chat_pane(pilot, app)
                prompt = pane.query_one("#chat-input", Input)
                await wait_until(pilot, lambda: app.focused is prompt, what="input focus")
                keys = footer_keys(app)
                assert keys.get("escape") == "cancel / leave", keys
                assert keys.get("tab") == "next field", keys
                prompt.value = "hi"
                await pilot.press("enter")
                await wait_until(pilot, lambda: pane.streaming, what="the reply to stream")
                await pilot.press("escape")
                await wait_until(
                    pilot, lambda: not pane.streaming, timeout=10.0, what="Esc to cancel the reply"
                )
                assert not isinstance(app.focused, Input)
                await pilot.press("m")  # a dashboard key again, not text in the input
                await wait_until(pilot, lambda: active_tab(app) == "machine-tab", what="m")
                assert prompt.value == ""

        await scenario()


@pytest.mark.anyio
async def test_chat_fields_carry_their_names(tmp_path: Path) -> None:
    with LoopbackOpenAI(models=("atlas-7b",)) as server:
        attach(server.url)
        app, _ = make_app(tmp_path, engine_poll_seconds=0.5)

        async def scenario() -> None:
            async with app.run_test(size=(80, 24)) as pilot:
                await pilot.press("c")
                pane = await mounted_chat_pane(pilot, app)
                titles = {field.id: field.border_title for field in pane.query(Input)}
                assert titles["chat-system"] == "system prompt"
                assert titles["chat-temperature"] == "temperature"
                assert titles["chat-max-tokens"] == "max tokens"
                for field_id in ("chat-temperature", "chat-max-tokens"):
                    # wide enough that its name is not cut (border corners + title)
                    field = pane.query_one(f"#{field_id}", Input)
                    assert field.outer_size.width >= len(titles[field_id]) + 4, field.outer_size

        await scenario()


@pytest.mark.parametrize(
    ("size", "must_show"),
    [
        ((80, 24), {"?": "Help"}),
        ((120, 40), {"?": "Help", "l": "Launch", "o": "Models", "q": "Quit"}),
    ],
    ids=["80x24", "120x40"],
)
@pytest.mark.anyio
async def test_footer_shows_help_at_80_columns_and_quit_at_120(
    tmp_path: Path, size: tuple[int, int], must_show: dict[str, str]
) -> None:
    """The footer cuts what does not fit: '? Help' must be whole at 80x24 (it lists every
    other key) and the whole row, 'q Quit' last, at 120x40 (it read 'q Q' before)."""
    from textual.widgets._footer import FooterKey

    app, _ = make_app(tmp_path)

    async def scenario() -> None:
        async with app.run_test(size=size) as pilot:

            def shown() -> dict[str, str]:
                return {
                    key.key_display: str(key.description)
                    for key in app.screen.query(FooterKey)
                    if key.region.width and key.region.right <= size[0]
                }

            # the footer is laid out a frame or more after start (on a loaded machine it was
            # still empty after one pause): wait for the keys, then judge what fits
            await wait_until(
                pilot,
                lambda: set(must_show) <= set(shown()),
                timeout=10,
                what=lambda: f"the footer's keys {sorted(must_show)}; shown: {shown()}",
            )
            for key, what in must_show.items():
                assert shown().get(key) == what, (key, shown())

    await scenario()
