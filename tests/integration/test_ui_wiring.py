"""The wired tabs and the memory guard in the real app, driven with Pilot against the real
Docker daemon and the real llama-server image: the metrics tab's numbers, a chat reply, the
watchdog line, its stop, the fit modal (cancel and force), the switch-wait screen with skip,
and the start-up timeline. Each test has its own scope and ports; flush=False (see
tests/integration/test_ui_launch.py for why).
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from textual.message import Message
from textual.widgets import Input

from sparkdeck.catalog import load_catalog
from sparkdeck.config.settings import GuardSettings, Settings, load_settings
from sparkdeck.runtime.client import DockerRuntime
from sparkdeck.service.guard_events import ServiceDecided
from sparkdeck.ui.app import SparkdeckApp
from sparkdeck.ui.chat.views import ReplyView
from sparkdeck.ui.dashboard.presets import PresetTable
from sparkdeck.ui.guard.screens import FitModal, SwitchWaitScreen
from sparkdeck.ui.guard.timeline import TimelineChart
from sparkdeck.ui.guard.watchdog_line import WatchdogLine
from sparkdeck.ui.readers import claim_cell
from sparkdeck.ui.screens.dialogs import ConfirmScreen
from tests.conftest import free_port, llama_preset_fields, scope_containers, write_preset
from tests.support.launch_pilot import READY_S, SIZE, press_and_confirm, running
from tests.support.memory_hog import MemoryHog, stop_line_below_a_hog
from tests.support.offline_app import engine_text, text_of
from tests.support.pane_host import wait_until

docker_tests = [pytest.mark.docker, pytest.mark.llama]


def make_app(
    tmp_path: Path, runtime: DockerRuntime, guard: GuardSettings | None = None
) -> SparkdeckApp:
    # the config dir's presets: the service the window starts (it guards the running engine,
    # then runs the next launch) reads them there
    presets = tmp_path / "config" / "presets"
    return SparkdeckApp(
        lambda: load_catalog([(presets, False)]),
        lambda: runtime,
        settings=Settings(guard=guard or GuardSettings()),
        flush=False,
        engine_poll_seconds=0.5,
    )


async def launch(pilot, app: SparkdeckApp, preset_id: str) -> None:
    table = app.query_one(PresetTable)
    await wait_until(pilot, lambda: preset_id in table.rows, what=f"preset {preset_id}")
    table.move_cursor(row=table.get_row_index(preset_id))
    await press_and_confirm(pilot, app, "l")
    await pilot.press("y")
    await wait_until(
        pilot,
        lambda: "state    ready" in engine_text(app) and preset_id in engine_text(app),
        timeout=READY_S,
        what=f"{preset_id} ready",
    )
    # The card says ready at the engine's first healthy answer; the launch then saves its
    # start-up timeline and hands the engine to the running watchdog. A launch asked for in
    # that moment is refused ("already running"), which made a following press flaky (CI).
    await wait_until(
        pilot, lambda: not app.launch_area.busy(), what=f"{preset_id}'s launch to finish"
    )


def test_claim_cell_is_the_guards_claim_then_the_knob(tmp_path):
    write_preset(
        tmp_path,
        "v",
        title="v",
        kind="vllm",
        image="vllm/vllm-openai:v1",
        model="m",
        vllm={"gpu_memory_utilization": 0.5},
    )
    write_preset(
        tmp_path,
        "o",
        title="o",
        kind="ollama",
        image="ollama/ollama:1",
        model="tiny:latest",
        ollama={"memory_gib": 12.5},
    )
    catalog = load_catalog([(tmp_path, False)])
    assert not catalog.problems, catalog.problems
    total = 100 * 2**30
    assert claim_cell(catalog.get("v"), total, GuardSettings()) == "50.0 GiB"
    assert claim_cell(catalog.get("o"), total, GuardSettings()) == "~12.5 GiB"  # stated
    # no /proc/meminfo
    assert claim_cell(catalog.get("v"), None, GuardSettings()) == "--gpu-memory-utilization 0.5"


@pytest.mark.docker
@pytest.mark.llama
@pytest.mark.anyio
async def test_metrics_chat_and_watchdog_tabs_on_a_real_llama_server(
    tmp_path, runtime, scope, llama_image
):
    write_preset(
        tmp_path / "config" / "presets", "tiny", **llama_preset_fields(llama_image, free_port())
    )
    app = make_app(tmp_path, runtime)
    decisions: list[ServiceDecided] = []  # the service's, relayed to the window

    def hook(message: Message) -> None:
        if isinstance(message, WatchdogLine.Guarded) and isinstance(message.event, ServiceDecided):
            decisions.append(message.event)

    async def scenario() -> None:
        async with app.run_test(size=SIZE, notifications=True, message_hook=hook) as pilot:
            line = app.query_one(WatchdogLine)
            assert "not running" in str(line.render())
            await launch(pilot, app, "tiny")

            # The running watchdog is the service's (the window started it once the engine
            # was up): its line follows the service's decisions on the real host's readings.
            seen = len(decisions)
            await wait_until(
                pilot,
                lambda: len(decisions) >= seen + 2,
                timeout=30.0,
                what="two decisions of the service's running watchdog",
            )
            assert str(line.render()).startswith(
                ("memory guard (service) OK", "memory guard (service) WARN")
            )
            assert "MemAvailable" in str(line.render())

            # The start-up timeline of this launch, in the guard tab.
            await pilot.press("g")
            chart = app.query_one(TimelineChart)
            assert chart.timeline is not None and chart.timeline.points
            await pilot.pause()
            assert "peak" in str(chart.render())

            # Chat: a real reply from llama-server through the chat tab.
            await pilot.press("c")
            await wait_until(pilot, lambda: bool(app.query("#chat-input")), what="chat pane")
            chat_input = app.query_one("#chat-input", Input)
            assert (
                chat_input.has_focus and "llama.cpp at http://127.0.0.1:" in chat_input.placeholder
            )
            app.query_one("#chat-max-tokens", Input).value = "24"
            await pilot.press(*"hello", "enter")
            await wait_until(pilot, lambda: bool(app.query(ReplyView)), what="the reply view")
            view = app.query_one(ReplyView)
            # (the caption says "waiting for the first token…" until then: "tok" alone
            # matched that at once, and a slow reply failed the test below)
            await wait_until(
                pilot,
                lambda: re.search(r"· \d+ tok(?!/)", str(view.caption.render())),
                timeout=60.0,
                what="the reply's figures",
            )
            # The tiny model's random tokens may decode to nothing visible; the server's own
            # count of what it generated (usage) is what a working reply must carry.
            caption = str(view.caption.render())
            generated = re.search(r"· (\d+) tok(?!/)", caption)  # "24 tok", not "404.0 tok/s"
            assert generated and int(generated.group(1)) > 0, caption
            assert "TTFT" in caption and not view.has_class("-failed")

            # Metrics: llama-server's /metrics after that reply, as numbers not n/a.
            await pilot.press("escape")  # leave the chat input so the tab key reaches the app
            app.set_focus(app.query_one(PresetTable))
            await pilot.press("e")
            rates = app.query_one("#metrics-rates")

            def counted() -> bool:
                trail = app.metrics_tab.trail
                return bool(trail) and trail[-1].ok and (trail[-1].generation_tps_avg or 0) > 0

            await wait_until(pilot, counted, timeout=30.0, what="tok/s from the reply")
            await pilot.pause()
            assert text_of(rates).startswith("tok/s") and "1 min" in text_of(rates)
            assert "running" in text_of(app.query_one("#metrics-queue"))

            # Stopped: sampling ends and the trail is emptied; the watchdog goes off.
            await press_and_confirm(pilot, app, "s")
            await pilot.press("y")
            await wait_until(
                pilot, lambda: "state    stopped" in engine_text(app), timeout=60.0, what="the stop"
            )
            await wait_until(pilot, lambda: app.metrics_tab.trail == (), what="the trail emptied")
            # Cancelling is asynchronous (a scrape in flight ends first): wait, but not long.
            await wait_until(
                pilot,
                lambda: (
                    not [
                        w
                        for w in app.workers
                        if w.group in ("metrics", "guard") and not w.is_finished
                    ]
                ),
                timeout=5.0,
                what="the metrics and guard workers to end",
            )
            assert "not running" in str(line.render())

    await scenario()


@pytest.mark.docker
@pytest.mark.llama
@pytest.mark.anyio
async def test_the_running_watchdog_stops_the_engine_and_says_so(
    tmp_path, isolated_dirs, runtime, docker_client, scope, llama_image
):
    """The guard that runs once the engine is up is the service's (the window starts it):
    a real bounded memory hog takes the host below the stop line of the settings the service
    reads, and the service stops the real container; the window's line, toast and card say
    so."""
    hog_size, stop_pct = stop_line_below_a_hog(isolated_dirs["config"])
    write_preset(
        tmp_path / "config" / "presets", "tiny", **llama_preset_fields(llama_image, free_port())
    )
    app = make_app(tmp_path, runtime, load_settings().guard)
    assert app.settings.guard.stop_available_pct == round(stop_pct, 2)

    async def scenario() -> None:
        async with app.run_test(size=SIZE, notifications=True) as pilot:
            line = app.query_one(WatchdogLine)
            await launch(pilot, app, "tiny")
            await wait_until(
                pilot,
                lambda: str(line.render()).startswith("memory guard (service) OK"),
                timeout=30.0,
                what="the service's watchdog running",
            )
            with MemoryHog(hog_size) as hog:
                hog.allocate()
                await wait_until(
                    pilot, lambda: line.level == "stop", timeout=30.0, what="the watchdog's stop"
                )
                # the notification's toast mounts a moment after the line turns (seen in CI)
                await wait_until(
                    pilot,
                    lambda: any(
                        "the memory guard stopped the engine: MemAvailable" in str(t.render())
                        for t in app.screen.query("Toast")
                    ),
                    timeout=30.0,
                    what=lambda: (
                        "the toast, among "
                        + repr([str(t.render()) for t in app.screen.query("Toast")])
                    ),
                )
            await wait_until(
                pilot,
                lambda: "stopped by the memory guard: MemAvailable" in engine_text(app),
                timeout=30.0,
                what="the card's note",
            )
            await wait_until(
                pilot,
                lambda: running(docker_client, scope) == [],
                timeout=30.0,
                what="the container stopped",
            )
            assert "STOPPED the engine" in str(line.render())

    await scenario()
    # The service decided (its record, written before the stop) on readings below the line
    # that the hog made the difference for: without its memory the host was above it.
    (stopping,) = [
        record
        for path in (isolated_dirs["data"] / "guard-actions").glob("*.json")
        if (record := json.loads(path.read_text()))["action"] == "stopping"
    ]
    last = stopping["window"][-1]
    line = stop_pct / 100 * last["total"]
    assert last["available"] < line < last["available"] + 0.9 * hog_size


@pytest.mark.docker
@pytest.mark.llama
@pytest.mark.anyio
async def test_fit_modal_cancel_then_force(tmp_path, runtime, docker_client, scope, llama_image):
    fields = llama_preset_fields(llama_image, free_port())
    fields["llamacpp"] = {**fields["llamacpp"], "memory_gib": 4000.0}  # no such machine
    write_preset(tmp_path / "config" / "presets", "huge", **fields)
    app = make_app(tmp_path, runtime)

    async def scenario() -> None:
        async with app.run_test(size=SIZE, notifications=True) as pilot:
            table = app.query_one(PresetTable)
            await wait_until(pilot, lambda: table.row_count == 1, what="the preset")
            assert table.get_row_at(0)[1] == "~4000.0 GiB"

            def fit_modal_up() -> bool:
                # the modal is the screen a frame or more before its buttons are mounted and
                # laid out (clicked too soon under load: NoMatches)
                if not isinstance(app.screen, FitModal):
                    return False
                buttons = app.screen.query("#launch-anyway")
                return bool(buttons) and buttons.first().region.width > 0

            await pilot.press("l")
            await wait_until(pilot, fit_modal_up, timeout=30.0, what="the fit modal")
            words = " ".join(str(s.render()) for s in app.screen.query("Static"))
            assert "huge does not fit" in words and "MemAvailable" in words
            await pilot.press("escape")  # cancel: nothing is asked further, nothing starts
            await pilot.pause(1.0)
            assert not isinstance(app.screen, (FitModal, ConfirmScreen))
            assert scope_containers(docker_client, scope) == []

            await pilot.press("l")
            await wait_until(pilot, fit_modal_up, timeout=30.0, what="the fit modal again")
            await pilot.click("#launch-anyway")
            await wait_until(
                pilot,
                lambda: isinstance(app.screen, ConfirmScreen),
                what="the confirmation of a forced launch",
            )
            assert text_of(app.screen.query_one("#confirm-title")) == "Launch huge anyway?"
            assert "forced" in text_of(app.screen.query_one("#confirm-steps"))
            await pilot.press("y")
            await wait_until(
                pilot,
                lambda: "state    ready" in engine_text(app),
                timeout=READY_S,
                what="the forced launch ready",
            )
            assert running(docker_client, scope) == ["huge"]

    await scenario()


@pytest.mark.docker
@pytest.mark.llama
@pytest.mark.in_process_owner(
    "a wait that only a skip ends needs a margin below zero: settings.toml (the service's) "
    "refuses one"
)
@pytest.mark.anyio
async def test_switch_wait_screen_shows_and_skips(
    tmp_path, runtime, docker_client, scope, llama_image
):
    for preset_id in ("first", "second"):
        write_preset(
            tmp_path / "config" / "presets",
            preset_id,
            **llama_preset_fields(llama_image, free_port()),
        )
    # A margin below zero: memory "comes back" only at 1000 GiB above what it was, so the
    # wait runs until skipped (the machine itself is left alone).
    app = make_app(
        tmp_path, runtime, GuardSettings(switch_margin_gib=-1000.0, switch_timeout_s=120.0)
    )

    async def scenario() -> None:
        async with app.run_test(size=SIZE, notifications=True) as pilot:
            await launch(pilot, app, "first")
            table = app.query_one(PresetTable)
            table.move_cursor(row=table.get_row_index("second"))
            await press_and_confirm(pilot, app, "l")
            await pilot.press("y")
            await wait_until(
                pilot,
                lambda: isinstance(app.screen, SwitchWaitScreen),
                timeout=60.0,
                what="the switch-wait screen",
            )
            screen = app.screen
            await wait_until(pilot, lambda: screen.last is not None, what="a progress step")
            assert "waiting" in text_of(screen.query_one("#switch-detail"))
            await pilot.press("s")
            assert not screen.skip.is_set()  # the first press only warns
            await pilot.press("s")
            await wait_until(
                pilot,
                lambda: not isinstance(app.screen, SwitchWaitScreen),
                timeout=30.0,
                what="the screen to close on skip",
            )
            assert screen.last is not None and screen.last.state == "skipped"
            await wait_until(
                pilot,
                lambda: "state    ready" in engine_text(app) and "second" in engine_text(app),
                timeout=READY_S,
                what="second ready after the skip",
            )
            assert running(docker_client, scope) == ["second"]

    await scenario()


@pytest.mark.anyio
async def test_bench_screen_help_and_chat_without_an_engine(tmp_path):
    """No Docker here: `b` opens the comparison on an empty history and `esc` returns; the
    help lists the tab, chat, guard-dialog and benchmark keys; the chat tab says no engine
    is ready and the palette's chat commands say what to do first."""
    from sparkdeck.ui.bench.view import BenchCompareScreen
    from sparkdeck.ui.screens.dialogs import HelpScreen
    from tests.support.offline_app import make_app as make_offline_app

    app, _ = make_offline_app(tmp_path)

    async def scenario() -> None:
        async with app.run_test(size=SIZE, notifications=True) as pilot:
            await pilot.press("b")
            await wait_until(
                pilot,
                lambda: isinstance(app.screen, BenchCompareScreen),
                what="the benchmark screen",
            )
            title = app.screen.query_one("#bench-title")
            await wait_until(
                pilot,
                lambda: "sparkdeck bench" in str(title.render()),
                what="the empty history's hint",
            )
            await pilot.press("escape")
            await wait_until(
                pilot,
                lambda: not isinstance(app.screen, BenchCompareScreen),
                what="back to the dashboard",
            )

            await pilot.press("question_mark")
            await wait_until(pilot, lambda: isinstance(app.screen, HelpScreen), what="help")
            keys = text_of(app.screen.query_one("#help-keys"))
            for expected in (
                "Metrics: The engine's own numbers",
                "in chat: send the message",
                "in chat: new chat",
                "in the fit dialog: Cancel",
                "waiting for memory (press twice): Skip the wait",
                "in the benchmark screen: Run: Benchmark the running engine",
                "Bench: Benchmark",
            ):
                assert expected in keys, expected
            await pilot.press("escape")

            await pilot.press("c")
            await wait_until(
                pilot, lambda: app.query_one("#side-tabs").active == "chat-tab", what="the chat tab"
            )
            assert "no engine is ready" in text_of(app.chat_tab.query_one("#chat-none"))
            assert app.chat_tab.pane is None
            chat_new = next(c for c in app.palette_commands() if c.name == "Chat: new chat")
            await chat_new.run()
            await wait_until(
                pilot,
                lambda: any(
                    "open the chat tab (c) with an engine ready" in str(t.render())
                    for t in app.screen.query("Toast")
                ),
                timeout=10.0,
                what="the toast",
            )

    await scenario()
