"""Key bindings: one id style, every id known to settings.toml's [keys], a remapped key works.

The app is the real one, started by Pilot with settings carrying a keymap; the settings file
is the real parser, so a bad id or key is named with its file and key as any setting is.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from textual.binding import Binding
from textual.widgets import TabbedContent

from sparkdeck.config.keys import KEY_IDS
from sparkdeck.config.settings import Settings, SettingsError, load_settings
from sparkdeck.ui.bench.view import BenchCompareScreen
from sparkdeck.ui.chat.pane import ChatPane
from sparkdeck.ui.chat.views import ConversationsScreen
from sparkdeck.ui.endpoint.view import ConnectScreen
from sparkdeck.ui.guard.screens import FitModal, SwitchWaitScreen
from sparkdeck.ui.history.postmortem import PostMortemScreen
from sparkdeck.ui.history.view import HistoryScreen
from sparkdeck.ui.keymap import BINDINGS
from sparkdeck.ui.screens.dialogs import ConfirmScreen, HelpScreen
from tests.support.offline_app import make_app, text_of
from tests.support.pane_host import wait_until

ID_STYLE = re.compile(r"[a-z]+(-[a-z]+)*")
OWNERS = (
    BINDINGS,
    ChatPane.BINDINGS,
    ConversationsScreen.BINDINGS,
    FitModal.BINDINGS,
    SwitchWaitScreen.BINDINGS,
    ConfirmScreen.BINDINGS,
    HelpScreen.BINDINGS,
    BenchCompareScreen.BINDINGS,
    HistoryScreen.BINDINGS,
    PostMortemScreen.BINDINGS,
    ConnectScreen.BINDINGS,
)


def test_every_binding_has_an_id_in_one_style_and_settings_knows_them_all() -> None:
    ids = [b.id for bindings in OWNERS for b in bindings if isinstance(b, Binding)]
    assert all(ids), "a binding without an id cannot be remapped"
    assert all(ID_STYLE.fullmatch(i) for i in ids if i), ids
    assert len(ids) == len(set(ids)), "two bindings share an id"
    assert set(ids) == KEY_IDS


def test_bad_ids_and_keys_are_named_with_the_file_and_key(tmp_path: Path) -> None:
    path = tmp_path / "settings.toml"
    path.write_text('[keys]\nlaunch = "L"\nlanuch = "k"\nstop = "ctrl+??"\nquit = 3\n')
    with pytest.raises(SettingsError) as raised:
        load_settings(path)
    text = str(raised.value)
    assert f"{path}: keys.lanuch: no key binding has this id" in text
    assert f"{path}: keys.stop: not a key: 'ctrl+??'" in text
    assert f"{path}: keys.quit: must be a key or a list of keys" in text
    path.write_text('[keys]\nlaunch = "L"\ntab-guard = ["G", "f7"]\n')
    assert load_settings(path).keys == {"launch": "L", "tab-guard": "G,f7"}


@pytest.mark.anyio
async def test_a_remapped_key_works_and_the_old_one_no_longer_does(tmp_path: Path) -> None:
    app, _ = make_app(tmp_path, settings=Settings(keys={"tab-metrics": "f5", "help": "f2"}))

    async def scenario() -> None:
        async with app.run_test(size=(160, 48)) as pilot:
            tabs = app.query_one(TabbedContent)
            await pilot.press("e")  # the default key, taken away by the keymap
            await pilot.pause()
            assert tabs.active == "machine-tab"
            await pilot.press("f5")
            await wait_until(pilot, lambda: tabs.active == "metrics-tab", what="the metrics tab")
            await pilot.press("f2")
            await wait_until(pilot, lambda: isinstance(app.screen, HelpScreen), what="the help")
            lines = text_of(app.screen.query_one("#help-keys")).splitlines()
            assert any(line.split()[0] == "f5" and "Metrics" in line for line in lines), lines

    await scenario()


@pytest.mark.anyio
async def test_a_key_given_to_two_dashboard_actions_is_told(tmp_path: Path) -> None:
    app, _ = make_app(tmp_path, settings=Settings(keys={"tab-metrics": "q"}))

    async def scenario() -> None:
        async with app.run_test(size=(160, 48), notifications=True) as pilot:
            await wait_until(
                pilot,
                lambda: any("'q' is bound to both" in n.message for n in app._notifications),
                what="the warning",
            )

    await scenario()
