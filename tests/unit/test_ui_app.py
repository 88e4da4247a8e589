"""The first Textual UI, driven through App.run_test() and Pilot.

Presets are real TOML files in tmp_path read by the real load_catalog. Docker is genuinely
absent on the test machines, so the "unreachable" path is the real one: either the real
DockerRuntime.connect against a socket that does not exist, or a factory that raises the same
DockerUnavailable that connect raises (used where a test counts connection attempts).
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest
from textual.message import Message
from textual.widget import Widget

from sparkdeck.catalog import PresetCatalog, load_catalog
from sparkdeck.config.settings import load_settings, settings_path
from sparkdeck.host.nvml import NvmlReader
from sparkdeck.launch.sequence import FlushSkipped
from sparkdeck.runtime.client import DockerRuntime
from sparkdeck.runtime.errors import DockerUnavailable
from sparkdeck.runtime.pull import PullProgress, PullTracker
from sparkdeck.ui.app import SparkdeckApp
from sparkdeck.ui.dashboard.card_steps import report_after
from sparkdeck.ui.dashboard.engine_card import EngineReport, engine_content, uptime_text
from sparkdeck.ui.dashboard.launch_messages import Progressed
from sparkdeck.ui.dashboard.presets import PresetTable
from sparkdeck.ui.machine.tab import MachineTab
from sparkdeck.ui.messages import DockerConnectionFailed
from sparkdeck.ui.readers import EngineReading
from sparkdeck.ui.screens.dialogs import HelpScreen
from tests.support.offline_app import (
    BROKEN,
    DOCKER_ERROR,
    NEVER,
    NOW,
    TINY_LLAMA,
    UnreachableDocker,
    engine_state,
    engine_text,
    environment_text,
    make_app,
    text_of,
)
from tests.support.pane_host import WidgetHost, wait_until

SIZE = (160, 48)


# ----- the app, driven by Pilot -----------------------------------------------------------


@pytest.mark.anyio
async def test_preset_table_rows_match_the_catalog(tmp_path: Path) -> None:
    app, loader = make_app(tmp_path)
    catalog = load_catalog([(loader.directory, False)])

    async def scenario() -> None:
        async with app.run_test(size=SIZE) as pilot:
            table = app.query_one("#preset-table", PresetTable)
            await wait_until(
                pilot,
                lambda: (
                    table.row_count == 2 and "…" not in [table.get_row_at(i)[4] for i in range(2)]
                ),
                what="two rows with model sizes",
            )
            rows = [tuple(table.get_row_at(i)) for i in range(table.row_count)]
            # by id; neither states memory_gib, so the guard cannot size either (Ollama
            # keeps its own models, the GGUF path is inside the image: "-" on disk)
            assert rows == [
                ("ollama-test", "unknown", "ollama/ollama:test", "tiny:latest", "-", "ollama"),
                (
                    "tiny-llama",
                    "unknown",
                    "local/llama-server:test",
                    "/models/tiny.gguf",
                    "-",
                    "llamacpp",
                ),
            ]
            assert sorted(catalog.presets) == ["ollama-test", "tiny-llama"]
            labels = [str(c.label) for c in table.columns.values()]
            assert labels == ["id", "claims", "image", "model", "on disk", "kind"]

    await scenario()


@pytest.mark.parametrize("lazy", [False, True], ids=["tests-mount", "run_app-mount"])
@pytest.mark.anyio
async def test_environment_panel_says_what_is_missing(tmp_path: Path, lazy: bool) -> None:
    """Also as `sparkdeck` runs it (run_app), with the side tabs mounted after the first
    frame: what the app binds into them and their sampling still arrive."""
    app, _ = make_app(tmp_path, lazy_side_tabs=lazy)
    posted: list[Message] = []

    async def scenario() -> None:
        async with app.run_test(size=SIZE, message_hook=posted.append) as pilot:
            if lazy:
                await wait_until(
                    pilot,
                    lambda: bool(app.query("#environment-panel")),
                    what="the side tabs to be mounted",
                )
            await wait_until(
                pilot,
                lambda: DOCKER_ERROR in environment_text(app),
                what="the Docker error in the environment panel",
            )
            await wait_until(
                pilot,
                lambda: "checking" not in environment_text(app),
                what="every environment check to finish",
            )
            text = environment_text(app)
            assert "unreachable" in text
            assert "2 loaded" in text and "problem" not in text
            assert "Docker unreachable" in engine_text(app)
            await wait_until(
                pilot,
                lambda: "reading" not in text_of(app.query_one("#gpu-rows")),
                what="the first telemetry sample",
            )
            gpu = text_of(app.query_one("#gpu-rows")).splitlines()[0]
            # This machine's real answer, whatever it is: a GPU name or the missing driver.
            reading = NvmlReader().read()
            assert gpu.split(maxsplit=1)[1] == (
                f"0: {reading.gpus[0].name}" if reading.gpus else reading.error
            )
            bars = text_of(app.query_one("#memory-bars"))
            assert [line.split()[0] for line in bars.splitlines()] == [
                "used",
                "available",
                "cache",
                "swap",
            ]
            assert "GiB" in bars

    await scenario()
    failures = [m for m in posted if isinstance(m, DockerConnectionFailed)]
    assert [m.error for m in failures] == [DOCKER_ERROR]
    assert any(isinstance(m, MachineTab.TelemetrySampled) for m in posted)


@pytest.mark.anyio
async def test_real_connect_to_a_missing_socket_reports_docker_unavailable(tmp_path: Path) -> None:
    socket = tmp_path / "no-docker.sock"
    app, _ = make_app(tmp_path, docker=lambda: DockerRuntime.connect(base_url=f"unix://{socket}"))

    async def scenario() -> None:
        async with app.run_test(size=SIZE) as pilot:
            await wait_until(
                pilot,
                lambda: "cannot reach the Docker daemon" in environment_text(app),
                what="the real connect's error",
            )
            assert "DOCKER_HOST" in environment_text(app)  # the advice comes through whole

    await scenario()


@pytest.mark.anyio
async def test_help_screen_lists_every_key_and_escape_closes_it(tmp_path: Path) -> None:
    app, _ = make_app(tmp_path)

    async def scenario() -> None:
        async with app.run_test(size=SIZE) as pilot:
            await pilot.press("question_mark")
            await wait_until(
                pilot, lambda: isinstance(app.screen, HelpScreen), what="the help screen"
            )
            text = text_of(app.screen.query_one("#help-keys"))
            lines = text.splitlines()
            for keys, what in (
                ("r", "Refresh"),
                ("q", "Quit"),
                ("? / f1", "Help"),
                ("l", "Launch"),
                ("enter", "launch"),
                ("s", "Stop"),
                ("t", "Theme"),
                ("^p", "palette"),
            ):
                assert any(line.split()[0] == keys.split()[0] and what in line for line in lines), (
                    keys,
                    text,
                )
            assert "f1" in text and "esc" in text
            await pilot.press("escape")
            await wait_until(
                pilot,
                lambda: not isinstance(app.screen, HelpScreen),
                what="the help screen to close",
            )
            await pilot.press("f1")
            await wait_until(
                pilot, lambda: isinstance(app.screen, HelpScreen), what="the help screen from f1"
            )
            await pilot.press("escape")
            await wait_until(
                pilot,
                lambda: not isinstance(app.screen, HelpScreen),
                what="the help screen to close again",
            )

    await scenario()


@pytest.mark.anyio
async def test_r_runs_the_readers_again(tmp_path: Path) -> None:
    docker = UnreachableDocker()
    app, loader = make_app(tmp_path, docker=docker)

    async def scenario() -> None:
        async with app.run_test(size=SIZE) as pilot:
            await wait_until(
                pilot, lambda: DOCKER_ERROR in environment_text(app), what="the first Docker check"
            )
            assert docker.calls == 1 and loader.calls == 1
            await pilot.press("r")
            await wait_until(
                pilot,
                lambda: docker.calls == 2 and loader.calls == 2,
                what="a second Docker check and preset load",
            )
            await pilot.press("r")
            await wait_until(pilot, lambda: docker.calls == 3, what="a third Docker check")

    await scenario()


@pytest.mark.anyio
async def test_engine_state_is_polled(tmp_path: Path) -> None:
    docker = UnreachableDocker()
    app, loader = make_app(tmp_path, docker=docker, engine_poll_seconds=0.05)

    async def scenario() -> None:
        async with app.run_test(size=SIZE) as pilot:
            await wait_until(pilot, lambda: docker.calls >= 4, what="the poll to read again")
            assert loader.calls == 1  # the poll reads the engine only

    await scenario()


@pytest.mark.anyio
async def test_q_quits(tmp_path: Path) -> None:
    app, _ = make_app(tmp_path)

    async def scenario() -> None:
        async with app.run_test(size=SIZE) as pilot:
            await pilot.press("q")
            await wait_until(pilot, lambda: not app.is_running, what="the app to exit")

    await scenario()
    assert app.return_code == 0


@pytest.mark.anyio
async def test_an_invalid_preset_file_is_named_in_the_panel(tmp_path: Path) -> None:
    app, _ = make_app(tmp_path, files={"tiny-llama.toml": TINY_LLAMA, "broken.toml": BROKEN})

    async def scenario() -> None:
        async with app.run_test(size=SIZE) as pilot:
            await wait_until(
                pilot, lambda: "1 problem" in environment_text(app), what="the preset problem"
            )
            text = environment_text(app)
            problem = next(line for line in text.splitlines() if "broken.toml" in line)
            assert "model" in problem and "required" in problem
            table = app.query_one("#preset-table", PresetTable)
            assert [table.get_row_at(i)[0] for i in range(table.row_count)] == ["tiny-llama"]

    await scenario()


@pytest.mark.anyio
async def test_many_problems_are_cut_short(tmp_path: Path) -> None:
    files = {f"broken-{n}.toml": BROKEN for n in range(5)}
    app, _ = make_app(tmp_path, files=files)

    async def scenario() -> None:
        async with app.run_test(size=SIZE) as pilot:
            await wait_until(
                pilot, lambda: "5 problems" in environment_text(app), what="five problems"
            )
            text = environment_text(app)
            assert "0 loaded" in text
            assert sum("broken-" in line for line in text.splitlines()) == 3
            assert "and 2 more" in text

    await scenario()


@pytest.mark.anyio
async def test_a_failing_worker_is_reported_as_a_notification(tmp_path: Path) -> None:
    def unreadable_presets() -> PresetCatalog:
        raise OSError("presets dir unreadable (test)")

    app = SparkdeckApp(unreadable_presets, UnreachableDocker(), engine_poll_seconds=NEVER)

    async def scenario() -> None:
        async with app.run_test(size=SIZE, notifications=True) as pilot:

            def toasts() -> list[str]:
                return [str(t.render()) for t in app.screen.query("Toast")]

            await wait_until(
                pilot,
                lambda: any("presets dir unreadable (test)" in t for t in toasts()),
                what="the notification",
            )
            assert any(t.startswith("load presets failed") for t in toasts())
            assert app.is_running  # a reader's failure never stops the app
            assert DOCKER_ERROR in environment_text(app)  # the other readers still ran

    await scenario()


# ----- rendering of engine states (real EngineState values, no terminal) -------------------


@pytest.mark.parametrize(
    ("docker_state", "healthy", "status"),
    [
        ("running", True, "ready"),
        ("running", False, "starting"),
        ("created", False, "starting"),
        ("paused", False, "paused"),
    ],
)
def test_engine_panel_states(docker_state: str, healthy: bool, status: str) -> None:
    reading = EngineReading(engine_state(docker_state), healthy)
    assert reading.status == status
    text = engine_content(EngineReport(reading=reading), NOW).plain
    assert "tiny-llama" in text and f"state    {status}" in text
    assert "http://127.0.0.1:8080" in text
    assert ("uptime   2m" in text.splitlines()) == reading.engine.alive


@pytest.mark.parametrize(
    ("seconds", "shown"),
    [
        (-3.0, "under a minute"),  # a clock a little behind Docker's
        (59.9, "under a minute"),
        (60.0, "1m"),
        (3599.0, "59m"),
        (3600.0, "1h 00m"),
        (90_061.0, "25h 01m"),
    ],
)
def test_the_uptime_is_whole_minutes(seconds: float, shown: str) -> None:
    assert uptime_text(seconds) == shown


def test_engine_panel_crashed_shows_exit_code_and_log() -> None:
    tail = (*tuple(f"line {n}" for n in range(10)), "CUDA error: out of memory")
    reading = EngineReading(engine_state("exited", exit_code=137, log_tail=tail))
    text = engine_content(EngineReport(reading=reading), NOW).plain
    assert "crashed (exit code 137)" in text and "uptime" not in text
    assert "CUDA error: out of memory" in text and "line 0" not in text


def test_engine_panel_without_engine_or_docker() -> None:
    text = engine_content(EngineReport(reading=EngineReading(None)), NOW).plain
    assert text == "state    stopped"
    assert "Docker unreachable" in engine_content(EngineReport(docker_error="x"), NOW).plain


def test_readers_do_not_import_textual() -> None:
    """The blocking readers stay usable from the CLI: importing them must not load Textual."""
    code = "import sys, sparkdeck.ui, sparkdeck.ui.readers; sys.exit('textual' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code], check=False).returncode == 0


# ----- theme, palette, responsiveness ------------------------------------------------------


@pytest.mark.anyio
async def test_t_switches_the_theme_and_settings_toml_keeps_it(tmp_path: Path) -> None:
    app, _ = make_app(tmp_path)

    async def scenario() -> None:
        async with app.run_test(size=SIZE) as pilot:
            assert app.theme == "spark-dark"
            await pilot.press("t")
            assert app.theme == "spark-light"  # the next bundled theme in name order
            await wait_until(
                pilot,
                lambda: settings_path().exists() and load_settings().ui.theme == "spark-light",
                what="settings.toml to say spark-light",
            )

    await scenario()
    # The next start picks the saved theme up.
    again, _ = make_app(tmp_path, settings=load_settings())

    async def restart() -> None:
        async with again.run_test(size=SIZE) as pilot:
            await pilot.pause()
            assert again.theme == "spark-light"
            await pilot.press("t")
            assert again.theme == "solarized-night"  # wraps round, in name order

    await restart()


@pytest.mark.anyio
async def test_palette_lists_every_action_and_theme_and_runs_them(tmp_path: Path) -> None:
    app, _ = make_app(tmp_path)

    async def scenario() -> None:
        async with app.run_test(size=SIZE) as pilot:
            names = [command.name for command in app.palette_commands()]
            assert names[:14] == [
                "Help",
                "Launch",
                "Stop",
                "Theme",
                "Refresh",
                "Machine",
                "Metrics",
                "Chat",
                "Guard",
                "Bench",
                "Models",
                "History",
                "Connect",
                "Quit",
            ]
            assert {"Chat: new chat", "Chat: chats", "Chat: cancel / leave"} <= set(names)
            assert {"Theme: spark-dark", "Theme: spark-light", "Theme: solarized-night"} <= set(
                names
            )
            await pilot.press("ctrl+p")
            await pilot.press(*"solarized-night")
            await pilot.pause(0.5)
            await pilot.press("down", "enter")
            await wait_until(
                pilot,
                lambda: app.theme == "solarized-night",
                what="the palette to switch the theme",
            )
            await wait_until(
                pilot,
                lambda: settings_path().exists() and load_settings().ui.theme == "solarized-night",
                what="the palette's theme to be saved too",
            )

    await scenario()


class SlowDocker:
    """A daemon that takes `seconds` to answer and then is unreachable (a wedged socket)."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self.started = 0
        self.finished = 0

    def __call__(self) -> DockerRuntime:
        self.started += 1
        time.sleep(self.seconds)
        self.finished += 1
        raise DockerUnavailable(DOCKER_ERROR)


@pytest.mark.anyio
async def test_a_slow_docker_daemon_never_freezes_the_interface(tmp_path: Path) -> None:
    docker = SlowDocker(4.0)
    app, _ = make_app(tmp_path, docker=docker)

    async def scenario() -> None:
        async with app.run_test(size=SIZE) as pilot:
            await wait_until(pilot, lambda: docker.started == 1, what="the Docker call")
            started = time.monotonic()
            await pilot.press("question_mark")
            await wait_until(
                pilot,
                lambda: isinstance(app.screen, HelpScreen),
                what="the help screen while Docker hangs",
                timeout=3.0,
            )
            assert docker.finished == 0 and time.monotonic() - started < 3.0
            await pilot.press("escape", "t")
            assert app.theme == "spark-light" and docker.finished == 0
            await wait_until(
                pilot,
                lambda: DOCKER_ERROR in environment_text(app),
                what="the late answer",
                timeout=10.0,
            )

    await scenario()


def test_telemetry_messages_coalesce() -> None:
    from tests.support.telemetry import GB10, replay_sampler

    sampler = replay_sampler(GB10, 0)
    older, newer = (MachineTab.TelemetrySampled(sampler.sample(), {}) for _ in range(2))
    assert newer.can_replace(older)
    assert not newer.can_replace(DockerConnectionFailed("x"))


def test_the_card_follows_a_pull_then_the_start() -> None:
    from sparkdeck.launch.sequence import ContainerStarted, PullStarted

    tracker, report = PullTracker(), EngineReport(reading=EngineReading(None))
    image = "vllm/vllm-openai:latest"
    report = report_after(report, PullStarted(image), tracker)
    assert "state    pulling" in engine_content(report, NOW).plain
    assert "waiting for sizes" in engine_content(report, NOW).plain
    for event in (
        PullProgress(image, "a", "Downloading", 50, 100),
        PullProgress(image, "b", "Downloading", 100, 300),
    ):
        report = report_after(report, event, tracker)
    text = engine_content(report, NOW).plain
    assert "38 %" in text and f"pulling {image}" in text  # (50 + 100) / (100 + 300)
    bar = next(line for line in text.splitlines() if line.startswith("pull"))
    assert bar.count("█") == 4 and bar.count("░") == 6  # 38 % of a 10-cell bar
    report = report_after(report, PullProgress(image, "a", "Pull complete", None, None), tracker)
    assert "50 %" in engine_content(report, NOW).plain  # (100 + 100) / 400
    report = report_after(report, FlushSkipped("--no-flush"), tracker)
    report = report_after(report, ContainerStarted(engine_state("running")), tracker)
    text = engine_content(report, NOW).plain
    assert "state    starting" in text and "pull" not in text.split("step")[0]
    assert "waiting for the health endpoint" in text and "tiny-llama" in text


class _PullFollower(Widget):
    """What the launch area does with each Progressed message it is handed, recorded."""

    def __init__(self) -> None:
        super().__init__()
        self.tracker, self.report = PullTracker(), EngineReport()
        self.fractions: list[float | None] = []

    def on_launch_area_progressed(self, message: Progressed) -> None:
        self.report = report_after(self.report, message.event, self.tracker)
        self.fractions.append(self.report.pull_fraction)


@pytest.mark.anyio
async def test_a_pull_burst_queued_behind_a_busy_window_never_pulls_the_bar_back() -> None:
    """A busy window reads a burst of pull events at once, and Textual lets a queued message
    stand for the one before it (Progressed.can_replace). Docker's "Extracting" bytes that
    follow a layer's "Download complete" count from 0 again: when "Download complete" was
    dropped for them, the bar went from 100 % back to 5 % here (to 1 % in a parallel run of
    the suite, 2026-12-05)."""
    image = "127.0.0.1:5000/busy:1"
    follower = _PullFollower()
    app = WidgetHost(follower)
    async with app.run_test() as pilot:
        burst = [PullProgress(image, "L", "Downloading", n, 100) for n in range(10, 101, 10)]
        burst += [
            PullProgress(image, "L", "Verifying Checksum", None, None),
            PullProgress(image, "L", "Download complete", None, None),
            PullProgress(image, "L", "Extracting", 5, 100),
        ]
        for event in burst:  # no await between them: all queued before the first is read
            follower.post_message(Progressed(event))
        follower.post_message(Progressed(FlushSkipped("--no-flush")))  # the end of the burst
        await wait_until(
            pilot,
            lambda: len(follower.fractions) > 0 and follower.report.detail != "",
            what=lambda: f"the burst read: {follower.fractions}",
        )
        # the ten byte counts of one step stood for each other; each new step was read
        assert follower.fractions[:-1] == [1.0, 1.0, 1.0, 1.0], follower.fractions


@pytest.mark.anyio
async def test_a_flushed_write_to_stderr_while_the_app_runs_reaches_textual(tmp_path: Path) -> None:
    """While the app runs, sys.stderr is Textual's capture, whose flush calls App._flush:
    an attribute of sparkdeck's own named `_flush` (the launch's cache-flush choice) hid that
    method, and a library's flushed warning raised `'NoneType' object is not callable`."""
    app, _ = make_app(tmp_path)

    async def test() -> None:
        async with app.run_test(size=SIZE) as pilot:
            print("a library's warning", file=sys.stderr, flush=True)
            sys.stderr.write("and a second line\n")
            sys.stderr.flush()
            await pilot.pause()
            assert app.is_running

    await test()
