"""What a person sees at 80x24 (and at 120x40): each tab's working content on screen.

The whole app, driven with Pilot and read back as the terminal shows it (the screen's
rendered lines), with ten presets, an engine running (its log pane open) and a chat pane
talking to a real OpenAI-compatible HTTP server on loopback (tests/support/openai_loopback).
Telemetry replays the H200 recording held at its power cap; Docker is genuinely absent, so
the running engine is a fixed reading handed in as the engine poll hands it (as in
test_ui_snapshots). Issue 27, items 4 (80x24) and 5 (focus after the chat tab).
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from textual.message import Message
from textual.pilot import Pilot
from textual.widget import Widget
from textual.widgets import Input

from sparkdeck.catalog import load_catalog
from sparkdeck.config.settings import Settings, UiSettings
from sparkdeck.runtime.client import DockerRuntime
from sparkdeck.telemetry.view import Row
from sparkdeck.ui.app import SparkdeckApp
from sparkdeck.ui.chat.views import ReplyView
from sparkdeck.ui.dashboard.launch import LaunchArea
from sparkdeck.ui.dashboard.presets import PresetTable
from sparkdeck.ui.dashboard.side_tabs import Sampling
from sparkdeck.ui.machine.live import rows_content
from sparkdeck.ui.readers import EngineReading
from sparkdeck.ui.screens.dialogs import ConfirmScreen
from tests.conftest import free_port, llama_preset_fields, write_preset
from tests.support.launch_pilot import READY_S
from tests.support.offline_app import TINY_LLAMA, engine_text, write_presets
from tests.support.openai_loopback import LoopbackOpenAI, Scripted, attach, chunk_event
from tests.support.pane_host import mounted_chat_pane, wait_until
from tests.support.snapshot_readings import HOUR, READY, no_docker
from tests.support.telemetry import CLOCK_EVENTS, replay_history, replay_sampler

SIZES = {"80x24": (80, 24), "120x40": (120, 40)}
PRESETS = [f"tiny-{n:02d}" for n in range(1, 11)]  # ten, as in the issue; the table's order
# How many of the ten show with an engine running (its log pane open) at each size
PRESETS_SHOWN = {"80x24": 6, "120x40": 10}
# llama-server b11434's timing line: the figures are at its end, past 80 columns
TIMING_LINE = (
    "slot print_timing: id  0 | task 0 | prompt eval time =     658.04 ms /    "
    "17 tokens (   38.71 ms per token,    25.83 tokens per second)"
)
PROMPT = "What is the capital of France?"
ANSWER = ["Paris", " is", " the", " capital", " of", " France", "."]


def small_app(tmp_path: Path, runtime: DockerRuntime | None = None) -> SparkdeckApp:
    presets = write_presets(tmp_path / "presets", {f"{name}.toml": TINY_LLAMA for name in PRESETS})
    return SparkdeckApp(
        lambda: load_catalog([(presets, False)]),
        no_docker if runtime is None else lambda: runtime,
        settings=Settings(ui=UiSettings(theme="spark-dark")),
        sampling=Sampling(
            replay_sampler(CLOCK_EVENTS, 12), replay_history(CLOCK_EVENTS), HOUR, HOUR
        ),
        engine_poll_seconds=HOUR,
    )


def screen_lines(app: SparkdeckApp) -> list[str]:
    """The terminal's rows as drawn now (the compositor's output, the screenshot's text)."""
    return [strip.text for strip in app.screen._compositor.render_strips()]


def on_screen(app: SparkdeckApp, text: str) -> bool:
    return any(text in line for line in screen_lines(app))


def screen_dump(app: SparkdeckApp) -> str:
    return "\n".join(screen_lines(app))


async def presets_read(pilot: Pilot) -> None:
    """The presets read and their sizes on disk looked up, the telemetry sampled."""
    app = pilot.app
    table = app.query_one(PresetTable)
    await wait_until(pilot, lambda: table.row_count == len(PRESETS), what="the presets")
    await wait_until(
        pilot,
        lambda: not any("…" in table.get_row_at(r) for r in range(table.row_count)),
        what="the models' sizes on disk",
    )
    await wait_until(
        pilot,
        lambda: "reading" not in str(app.query_one("#gpu-rows").render()),
        what="the telemetry sample",
    )


async def engine_running(pilot: Pilot) -> None:
    """As presets_read, and an engine ready with its log lines shown."""
    app = pilot.app
    await presets_read(pilot)
    app.launch_area.log_pane._runtime = None  # lines come from here, not from Docker
    app.docker = EngineReading(READY, healthy=True)
    app.launch_area.log_pane.add_lines(
        READY.container_id,
        ["main: model loaded", TIMING_LINE, "srv  update_slots: all slots are idle"],
    )
    await wait_until(
        pilot,
        lambda: app.launch_area.log_pane.display and app.launch_area.log_pane.size.height > 0,
        what="the log pane",
    )
    await pilot.wait_for_scheduled_animations()
    await pilot.pause(0.3)


def assert_rate_line_shown(app: SparkdeckApp, view: ReplyView, chat_log: Widget) -> None:
    """The reply's caption (TTFT, tok/s) lies whole inside the chat log's view, and its TTFT
    figure is on the screen (the caption's wording is the chat code's: it may wrap)."""
    caption = str(view.caption.render())
    ttft = re.search(r"TTFT [\d.]+ s", caption)
    assert ttft is not None, caption
    assert chat_log.region.contains_region(view.caption.region), (
        view.caption.region,
        chat_log.region,
        screen_dump(app),
    )
    assert on_screen(app, ttft.group()), (caption, screen_dump(app))


def scripted_reply() -> Scripted:
    """A short answer streamed word by word, then llama.cpp's usage and timings chunk."""
    end = {
        "choices": [],
        "object": "chat.completion.chunk",
        "usage": {
            "completion_tokens": len(ANSWER),
            "prompt_tokens": 25,
            "total_tokens": 25 + len(ANSWER),
        },
        "timings": {
            "prompt_n": 25,
            "prompt_ms": 30.0,
            "prompt_per_second": 833.3,
            "predicted_n": len(ANSWER),
            "predicted_ms": 140.0,
            "predicted_per_second": 50.0,
        },
    }
    finish = {
        "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}],
        "object": "chat.completion.chunk",
    }
    return Scripted(
        [chunk_event(word) for word in ANSWER]
        + [
            f"data: {json.dumps(finish)}\n\n".encode(),
            f"data: {json.dumps(end)}\n\n".encode(),
            b"data: [DONE]\n\n",
        ],
        pause=0.02,
    )


@pytest.mark.parametrize("size", list(SIZES))
@pytest.mark.anyio
async def test_a_chat_reply_its_prompt_and_its_rate_line_are_on_screen(
    tmp_path: Path, size: str
) -> None:
    """At 80x24 the chat log had no rows left: neither the prompt, the reply nor its TTFT
    line showed after sending (only after Maximize)."""
    with LoopbackOpenAI(models=("atlas-7b",)) as server:
        attach(server.url)
        server.answer(scripted_reply())
        app = small_app(tmp_path)

        async def scenario() -> None:
            async with app.run_test(size=SIZES[size]) as pilot:
                await engine_running(pilot)
                await pilot.press("c")
                pane = await mounted_chat_pane(pilot, app)
                prompt = pane.query_one("#chat-input", Input)
                await wait_until(pilot, lambda: app.focused is prompt, what="input focus")
                prompt.value = PROMPT
                await pilot.press("enter")
                await wait_until(
                    pilot,
                    lambda: len(pane.query(ReplyView)) == 1 and not pane.streaming,
                    what="the reply to end",
                )
                await pilot.wait_for_scheduled_animations()
                await pilot.pause(0.3)
                view = pane.query_one(ReplyView)
                shown = screen_dump(app)
                assert on_screen(app, PROMPT), shown
                assert on_screen(app, "Paris is the capital of France."), shown
                assert_rate_line_shown(app, view, pane.query_one("#chat-log"))
                assert on_screen(app, "ask OpenAI-compatible"), shown  # the input, too
                footer = screen_lines(app)[-1]  # the chat's keys, all six (cut at ^o before)
                for item in (
                    "esc cancel / leave",
                    "tab next field",
                    "^r fold",
                    "^t think",
                    "^o chats",
                    "^n new chat",
                ):
                    assert item in footer, (item, footer)

        await scenario()


@pytest.mark.parametrize("size", list(SIZES))
@pytest.mark.anyio
async def test_the_footer_offers_bench_models_and_quit(tmp_path: Path, size: str) -> None:
    """At 80 columns the footer was cut at `^p palette`, after `b`: Bench, Models and Quit
    were not on screen."""
    app = small_app(tmp_path)

    async def scenario() -> None:
        async with app.run_test(size=SIZES[size]) as pilot:
            await engine_running(pilot)
            footer = screen_lines(app)[-1]
            for item in ("? Help", "l Launch", "s Stop", "b Bench", "o Models", "q Quit"):
                assert item in footer, (item, footer)
            assert "m e c g tabs" in footer, footer  # the tab keys, in the tab bar's order

    await scenario()


@pytest.mark.parametrize("size", list(SIZES))
@pytest.mark.anyio
async def test_presets_log_figures_and_gpu_numbers_show_with_an_engine_running(
    tmp_path: Path, size: str
) -> None:
    """At 80x24 only 2 of 10 presets showed while the log took 6 rows; log lines were cut
    before their figures; the machine tab showed the GPU panel's border and none of it."""
    app = small_app(tmp_path)

    async def scenario() -> None:
        async with app.run_test(size=SIZES[size]) as pilot:
            await engine_running(pilot)
            shown = screen_dump(app)
            rows = [name for name in PRESETS if on_screen(app, f" {name} ")]
            assert len(rows) >= PRESETS_SHOWN[size], (rows, shown)
            assert rows == PRESETS[: len(rows)], rows  # from the top, in order
            # the timing line's figures and its end, wrapped at the pane's width
            for figure in ("658.04 ms", "38.71 ms", "25.83", "second)"):
                assert on_screen(app, figure), (figure, shown)
            # the GPU at a glance, then the machine tab's GPU panel with its figures
            for figure in ("1440 MHz", "693 W", "61°C"):
                assert on_screen(app, figure), (figure, shown)
            await pilot.press("m")
            await pilot.pause(0.3)
            shown = screen_dump(app)
            for row in ("available", "SM       1440 / 1980 MHz", "power    692.6 W"):
                assert on_screen(app, row), (row, shown)

    await scenario()


def test_a_label_as_long_as_its_column_keeps_a_space_before_its_figure() -> None:
    """A GB10 rail's label (` dc_input`, 9 characters) ran into its watts: `dc_input97.4 W`."""
    text = rows_content([Row(" dc_input", "97.4 W"), Row("SM", "2405 MHz")]).plain
    assert text.splitlines() == [" dc_input 97.4 W", "SM       2405 MHz"]


@pytest.mark.docker
@pytest.mark.parametrize("size", list(SIZES))
@pytest.mark.anyio
async def test_the_keys_go_back_to_the_presets_after_the_chat_tab(
    tmp_path: Path, size: str, runtime: DockerRuntime
) -> None:
    """After c, Esc and a tab key the arrows moved nothing on the presets and `l` offered
    the preset highlighted before; several Tabs were needed to get the presets back.
    `l` plans against a real Docker daemon (the plan asks it what runs), so the launch it
    offers is the one the confirmation would name."""
    with LoopbackOpenAI(models=("atlas-7b",)) as server:
        attach(server.url)
        planned: list[str] = []

        def hook(message: Message) -> None:
            if isinstance(message, LaunchArea.Planned):
                planned.append(message.plan.preset.id)

        app = small_app(tmp_path, runtime)

        async def launch_offers(pilot: Pilot, preset: str) -> None:
            await pilot.press("l")
            await wait_until(pilot, lambda: planned, what="`l` to plan a launch")
            assert planned.pop() == preset
            await pilot.pause(0.2)
            if app.screen is not app.screen_stack[0]:  # the confirmation: not now
                await pilot.press("escape")
                await wait_until(
                    pilot,
                    lambda: app.screen is app.screen_stack[0],
                    what="the confirmation to close",
                )

        async def scenario() -> None:
            async with app.run_test(size=SIZES[size], message_hook=hook) as pilot:
                await presets_read(pilot)
                table = app.query_one(PresetTable)
                await pilot.press("down")  # the presets have the keys from the start
                assert app.focused is table and table.selected_id() == PRESETS[1]
                row = 1
                for back in ("m", "e", "g"):
                    await pilot.press("c")
                    prompt = (await mounted_chat_pane(pilot, app)).query_one("#chat-input", Input)
                    await wait_until(
                        pilot,
                        lambda prompt=prompt: app.focused is prompt,
                        what="the chat input to take the keys",
                    )
                    await pilot.press("escape", back)
                    await wait_until(
                        pilot,
                        lambda: app.focused is table,
                        what=lambda back=back: f"the table's focus after {back}: {app.focused}",
                    )
                    await pilot.press("down")
                    row += 1
                    assert table.selected_id() == PRESETS[row], (back, table.selected_id())
                    await launch_offers(pilot, PRESETS[row])
                    assert on_screen(app, f" {PRESETS[row]} "), screen_dump(app)

        await scenario()


@pytest.mark.docker
@pytest.mark.llama
@pytest.mark.anyio
async def test_a_real_llama_server_at_80x24_chat_log_and_focus(
    tmp_path: Path, runtime: DockerRuntime, llama_image: str
) -> None:
    """The whole loop at 80x24 with a real llama-server launched from the keyboard: its own
    log lines end on screen, a question's prompt, reply and TTFT line show in the chat tab,
    and the tab key after Esc gives the keys back to the presets."""
    presets = tmp_path / "presets"
    write_preset(presets, "tiny-a", **llama_preset_fields(llama_image, free_port()))
    write_presets(presets, {f"{name}.toml": TINY_LLAMA for name in PRESETS[1:]})
    app = SparkdeckApp(
        lambda: load_catalog([(presets, False)]),
        lambda: runtime,
        flush=False,
        engine_poll_seconds=0.5,
    )

    async def scenario() -> None:
        async with app.run_test(size=(80, 24)) as pilot:
            table = app.query_one(PresetTable)
            await wait_until(pilot, lambda: table.row_count == len(PRESETS), what="presets")
            await pilot.press(*["down"] * table.get_row_index("tiny-a"))  # the last row
            assert table.selected_id() == "tiny-a"
            await pilot.press("l")
            await wait_until(
                pilot,
                lambda: isinstance(app.screen, ConfirmScreen),
                timeout=30.0,
                what="the confirmation",
            )
            await pilot.press("y")
            await wait_until(
                pilot,
                lambda: "state    ready" in engine_text(app),
                timeout=READY_S,
                what=lambda: (
                    "the engine to be ready: the card says "
                    f"{engine_text(app)!r}; notifications "
                    f"{[note.message for note in app._notifications]}"
                ),
            )
            log = app.launch_area.log_pane
            await wait_until(
                pilot, lambda: len(log.lines) >= 3, timeout=30.0, what="llama-server's log lines"
            )
            await pilot.pause(0.5)
            last = log.lines[-1].split()[-1]  # the newest line's end: where its figures are
            assert on_screen(app, last), (log.lines[-1], screen_dump(app))

            await pilot.press("c")
            pane = await mounted_chat_pane(pilot, app)
            pane.query_one("#chat-max-tokens", Input).value = "8"
            prompt = pane.query_one("#chat-input", Input)
            await wait_until(pilot, lambda: app.focused is prompt, what="input focus")
            prompt.value = PROMPT
            await pilot.press("enter")
            await wait_until(
                pilot,
                lambda: len(pane.query(ReplyView)) == 1 and not pane.streaming,
                timeout=60.0,
                what="the reply",
            )
            await pilot.wait_for_scheduled_animations()
            await pilot.pause(0.3)
            view = pane.query_one(ReplyView)
            assert on_screen(app, PROMPT), screen_dump(app)
            chat_log = pane.query_one("#chat-log")
            assert_rate_line_shown(app, view, chat_log)
            # the whole reply within the log's view, its text and its rate line
            assert chat_log.region.contains_region(view.region), (view.region, screen_dump(app))

            await pilot.press("escape", "m")
            await wait_until(pilot, lambda: app.focused is table, what=lambda: str(app.focused))
            await pilot.press("up")
            assert table.selected_id() == PRESETS[-1], table.selected_id()  # the row above

    await scenario()
