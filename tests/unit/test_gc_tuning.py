"""The collector settings `sparkdeck` runs with (sparkdeck/ui/gc_tuning.py).

What they buy is measured by benchmarks/chat_pane_lag.py (`--default-gc` compares); these
tests check that the app applies them when asked, and only then, and that they do what the
module says. The interpreter's settings are restored after each test.
"""

from __future__ import annotations

import gc
import subprocess
import sys
import time
import weakref
from collections.abc import Iterator
from pathlib import Path

import pytest

from sparkdeck.ui import gc_tuning
from sparkdeck.ui.gc_tuning import FREEZE_AFTER_S
from tests.support.offline_app import make_app, text_of
from tests.support.pane_host import wait_until


@pytest.fixture(autouse=True)
def restore_collector() -> Iterator[None]:
    threshold, enabled = gc.get_threshold(), gc.isenabled()
    yield
    gc.unfreeze()
    gc.set_threshold(*threshold)
    (gc.enable if enabled else gc.disable)()


def test_the_younger_generations_are_collected_less_often_and_the_oldest_kept() -> None:
    gc.set_threshold(700, 11, 12)
    gc_tuning.tune_for_ui()
    assert gc.get_threshold() == (10_000, 50, 12)


def test_collection_pauses_for_start_up_and_resumes_tuned() -> None:
    gc.enable()
    gc_tuning.pause_for_startup()
    assert not gc.isenabled()
    gc_tuning.tune_for_ui()
    assert gc.isenabled() and gc.get_threshold()[:2] == (10_000, 50)


def test_the_sparkdeck_command_pauses_collection_before_textual_is_imported() -> None:
    """`sparkdeck` with no arguments, in a fresh interpreter: at the moment Textual is first
    imported (the imports are what the pause is for) the collector is already paused."""
    probe = (
        "import gc, sys\n"
        "class AtTextual:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name == 'textual':\n"
        "            print('collecting' if gc.isenabled() else 'paused')\n"
        "            raise SystemExit(0)\n"
        "sys.meta_path.insert(0, AtTextual())\n"
        "from sparkdeck.__main__ import main\n"
        "main([])\n"
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60)
    assert out.stdout.strip() == "paused", out.stderr


def test_freezing_collects_garbage_first_and_freezes_what_survives() -> None:
    gc.unfreeze()

    class Node:
        def __init__(self) -> None:
            self.me = self

    garbage = weakref.ref(Node())  # a cycle nobody holds: collected, not frozen forever
    kept = Node()
    assert garbage() is not None  # only the cycle collector can free it
    frozen = gc_tuning.freeze_startup_objects()
    assert frozen == gc.get_freeze_count() > 0
    assert garbage() is None
    assert kept.me is kept


@pytest.mark.parametrize("tune", [True, False])
@pytest.mark.anyio
async def test_the_app_resumes_and_freezes_collection_only_when_asked(
    tmp_path: Path, tune: bool
) -> None:
    gc.unfreeze()

    async def scenario() -> None:
        app, _ = make_app(tmp_path, tune_gc=tune)
        if tune:
            gc_tuning.pause_for_startup()  # as the `sparkdeck` command does before run_app
        threshold = gc.get_threshold()
        started = time.monotonic()
        async with app.run_test(size=(120, 40)) as pilot:
            await wait_until(
                pilot,
                lambda: "loaded" in text_of(app.query_one("#environment-panel")),
                what="the presets",
            )
            # collection resumes, tuned, once the first frame is drawn; untouched otherwise
            assert gc.isenabled()
            assert gc.get_threshold() == ((10_000, 50, threshold[2]) if tune else threshold)
            if time.monotonic() - started < FREEZE_AFTER_S - 0.5:  # a loaded machine may lag
                assert gc.get_freeze_count() == 0  # not before the first data is on screen
            if tune:
                await wait_until(
                    pilot,
                    lambda: gc.get_freeze_count() > 0,
                    timeout=FREEZE_AFTER_S + 10,
                    what="the freeze",
                )
            else:
                await pilot.pause(FREEZE_AFTER_S + 0.5)
                assert gc.get_freeze_count() == 0

    await scenario()
