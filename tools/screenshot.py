"""Export the README's dashboard screenshot (docs/dashboard.svg) from a real run of the app.

Runs the real app at 120x40 on this machine's real readers (/proc/meminfo, PSI, NVML or its
absence, spark_hwmon or its absence, the Docker daemon at DOCKER_HOST and the bundled
presets plus the user's), waits until every panel has data and the sparklines have a few
samples, and saves the SVG Textual itself renders. Nothing on the screen is staged.

With --launch PRESET the preset is launched through the keys a user presses (cursor to it,
l, y), the shot is taken once the engine is ready and its log is in the pane, and the engine
is stopped again (s, y) before the tool exits. The page cache is not flushed. With --ask
TEXT the question is typed into the chat tab (c) and the reply awaited, so the engine has
served something; --tab KEY then presses a tab's key (m, e, c, g) before the shot.

Usage: .venv/bin/python tools/screenshot.py [--out docs/dashboard.svg] [--seconds 8]
                                            [--launch PRESET] [--ask TEXT] [--tab KEY]
"""

from __future__ import annotations

import argparse
import asyncio
import time
from collections.abc import Callable
from pathlib import Path

from textual.pilot import Pilot

from sparkdeck.ui.app import SparkdeckApp
from sparkdeck.ui.dashboard.log_pane import LogPane
from sparkdeck.ui.dashboard.presets import PresetTable
from sparkdeck.ui.screens.dialogs import ConfirmScreen

ROOT = Path(__file__).resolve().parent.parent


async def until(
    pilot: Pilot, predicate: Callable[[], bool], what: str, timeout: float = 90.0
) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise SystemExit(f"gave up waiting for {what}")
        await pilot.pause(0.1)


def text(app: SparkdeckApp, selector: str) -> str:
    return str(app.query_one(selector).content)


async def launch(pilot: Pilot, app: SparkdeckApp, preset_id: str) -> None:
    table = app.query_one(PresetTable)
    await until(pilot, lambda: preset_id in table.rows, f"preset {preset_id}")
    table.move_cursor(row=table.get_row_index(preset_id))
    await pilot.press("l")
    await until(pilot, lambda: isinstance(app.screen, ConfirmScreen), "the confirmation")
    await pilot.press("y")
    await until(pilot, lambda: "state    ready" in text(app, "#engine-card"), "ready")
    await until(pilot, lambda: len(app.query_one(LogPane).lines) > 3, "the log")


async def stop(pilot: Pilot, app: SparkdeckApp) -> None:
    await pilot.press("s")
    await until(pilot, lambda: isinstance(app.screen, ConfirmScreen), "the stop confirmation")
    await pilot.press("y")
    await until(pilot, lambda: "state    stopped" in text(app, "#engine-card"), "the stop")


async def ask(pilot: Pilot, app: SparkdeckApp, question: str) -> None:
    """Ask the ready engine one question through the chat tab and wait for the reply."""
    await pilot.press("c")
    await until(pilot, lambda: bool(app.query("#chat-input")), "the chat pane")
    await pilot.press(*question, "enter")
    await until(
        pilot,
        lambda: bool(app.query(".chat-reply")) and not app.chat_tab.pane.streaming,
        "the reply",
    )  # type: ignore[union-attr]
    app.set_focus(app.query_one(PresetTable))  # tab keys reach the app again


async def capture(
    out: Path, seconds: float, preset_id: str | None, question: str | None, tab: str | None
) -> None:
    app = SparkdeckApp(flush=False)
    async with app.run_test(size=(120, 40)) as pilot:
        await until(
            pilot,
            lambda: (
                "reading" not in text(app, "#gpu-rows")
                and "checking" not in text(app, "#environment-panel")
            ),
            "every panel",
        )
        if preset_id:
            await launch(pilot, app, preset_id)
        if question:
            await ask(pilot, app, question)
        if tab:
            await pilot.press(tab)
        await pilot.pause(seconds)  # a few samples of history in the sparklines
        out.parent.mkdir(parents=True, exist_ok=True)
        app.save_screenshot(filename=out.name, path=str(out.parent))
        if preset_id:
            await stop(pilot, app)
    print(f"wrote {out}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "dashboard.svg")
    parser.add_argument("--seconds", type=float, default=8.0)
    parser.add_argument("--launch", metavar="PRESET", help="launch this preset for the shot")
    parser.add_argument("--ask", metavar="TEXT", help="ask the launched engine this in chat")
    parser.add_argument("--tab", metavar="KEY", help="press this tab key before the shot")
    args = parser.parse_args()
    asyncio.run(capture(args.out, args.seconds, args.launch, args.ask, args.tab))


if __name__ == "__main__":
    main()
