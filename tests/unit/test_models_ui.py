"""The TUI's model views: the preset table's "on disk" column.

Real parts: preset files loaded by sparkdeck's loader, a Hugging Face cache written in the
real layout (tests/support/hf_cache.py; sizes from sparse files, so a 1.5 GiB model costs no
disk), and Textual's Pilot driving the real widgets.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from textual.app import App

from sparkdeck.presets import load_file
from sparkdeck.ui.dashboard.presets import ON_DISK, PresetTable
from sparkdeck.ui.readers import model_cell
from tests.conftest import base_fields, write_preset
from tests.support.hf_cache import add_to_cache
from tests.support.pane_host import WidgetHost, wait_until

GIB = 2**30


def _sparse(path: Path, size: int) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("wb") as handle:
        handle.truncate(size)
    return path


@pytest.fixture
def presets(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict:
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    monkeypatch.delenv("HF_HUB_CACHE", raising=False)
    snapshot = add_to_cache(tmp_path / "hf" / "hub", "org/here", {"config.json": b"{}"})
    blob = _sparse(tmp_path / "hf" / "hub" / "models--org--here" / "blobs" / "w", 3 * GIB // 2)
    (snapshot / "model.safetensors").symlink_to(os.path.relpath(blob, snapshot))
    gguf = _sparse(tmp_path / "models" / "small.gguf", GIB // 2)
    directory = tmp_path / "presets"
    fields = {**base_fields(), "hf_cache": True, "port": 8000}
    made = {
        "here": write_preset(
            directory, "here", title="t", kind="vllm", image="i", model="org/here", **fields
        ),
        "absent": write_preset(
            directory, "absent", title="t", kind="vllm", image="i", model="org/absent", **fields
        ),
        "no-mount": write_preset(
            directory,
            "no-mount",
            title="t",
            kind="vllm",
            image="i",
            model="org/absent",
            **{**fields, "hf_cache": False},
        ),
        "ollama": write_preset(
            directory, "ollama", title="t", kind="ollama", image="i", model="llama3:8b", **fields
        ),
        "gguf": write_preset(
            directory, "gguf", title="t", kind="llamacpp", image="i", model=str(gguf), **fields
        ),
    }
    return {key: load_file(path) for key, path in made.items()}


def host() -> WidgetHost:
    """The preset table alone, with its own default styles."""
    return WidgetHost(PresetTable(id="preset-table"), css_path=None)


def test_the_cell_says_the_size_missing_or_that_it_cannot_tell(presets: dict) -> None:
    cells = {key: model_cell(preset) for key, preset in presets.items()}
    assert cells == {
        "here": "1.5 GiB",
        "absent": "missing",
        "no-mount": "-",
        "ollama": "-",
        "gguf": "0.5 GiB",
    }


@pytest.mark.anyio
async def test_the_table_shows_rows_first_then_the_sizes_from_a_worker(presets: dict) -> None:
    async def scenario() -> None:
        async with host().run_test(size=(140, 12)) as pilot:
            table = pilot.app.query_one(PresetTable)
            rows = [(p.id, "1.0 GiB", p.image, p.model, p.kind) for _, p in sorted(presets.items())]
            table.show_rows(rows)
            table.read_model_sizes(list(presets.values()))
            # the rows are there at once; the sizes come when the worker has walked the cache
            assert table.get_cell("here", ON_DISK) == "…"
            await wait_until(pilot, lambda: table.get_cell("here", ON_DISK) != "…")
            assert table.get_cell("here", ON_DISK) == "1.5 GiB"
            assert table.get_cell("absent", ON_DISK) == "missing"
            assert table.get_cell("ollama", ON_DISK) == "-"
            await pilot.pause()
            line = table.render_line(1 + sorted(presets).index("here")).text
            assert "1.5 GiB" in line and "org/here" in line  # drawn whole, not cut
            # rows read again keep the last sizes instead of going back to "…"
            table.show_rows(rows)
            assert table.get_cell("absent", ON_DISK) == "missing"

    await scenario()


def test_the_engine_card_shows_a_launch_s_model_download() -> None:
    from sparkdeck.launch.events import ModelDownloading, ModelDownloadStarted
    from sparkdeck.models.pull import PullProgress
    from sparkdeck.runtime.pull import PullTracker
    from sparkdeck.ui.dashboard.card_steps import report_after
    from sparkdeck.ui.dashboard.engine_card import EngineReport

    report = report_after(
        EngineReport(), ModelDownloadStarted("o/r", "c" * 40, 2, 100, 100), PullTracker()
    )
    assert (report.phase, report.pull_fraction) == ("pulling", 0.0)
    half = PullProgress("w.safetensors", 40, 80, 50, 100, 2**20, 50.0)
    report = report_after(report, ModelDownloading("o/r", half), PullTracker())
    assert report.pull_fraction == 0.5
    assert report.detail.startswith("downloading o/r:  50%") and "ETA 50 s" in report.detail


# ----- the models view: the library and a pull against a FAKE Hub on loopback ---------------

CONFIG = (
    Path(__file__).parents[1] / "fixtures" / "model_configs" / "llama-3.1-8b.json"
).read_bytes()


@pytest.fixture
def hub(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    from tests.support.fake_hub import FakeHub, FakeRepo

    weights = b"\x07" * (24 * 2**20)  # huggingface_hub reports every 10 MiB
    repo = FakeRepo(
        {"config.json": CONFIG, "model.safetensors": weights}, lfs=("model.safetensors",)
    )
    with FakeHub({"fake-org/tiny": repo}) as fake:
        monkeypatch.setenv("HF_ENDPOINT", fake.url)
        monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
        monkeypatch.setenv("HF_HUB_DISABLE_XET", "1")
        monkeypatch.delenv("HF_TOKEN", raising=False)
        add_to_cache(tmp_path / "hub", "org/already-here", {"config.json": CONFIG})
        yield fake


@pytest.mark.anyio
async def test_models_view_lists_the_library_and_pulls_with_progress(hub) -> None:
    from textual.widgets import DataTable, ProgressBar, Static

    from sparkdeck.ui.models.view import ModelsScreen

    lines: list[str] = []

    def hook(message: object) -> None:  # every message the app handles, as it comes
        if isinstance(message, ModelsScreen.PullAdvanced):
            lines.append(message.progress.describe())

    async def scenario() -> None:
        async with App[None]().run_test(size=(160, 30), message_hook=hook) as pilot:
            screen = ModelsScreen({"my-preset": "org/already-here"})
            await pilot.app.push_screen(screen)
            table = screen.query_one(DataTable)
            await wait_until(pilot, lambda: table.row_count == 1)
            row = table.get_row_at(0)
            assert row[0] == "org/already-here" and row[-1] == "my-preset"
            status = screen.query_one("#models-pull-status", Static)
            screen.query_one("#models-pull-input").focus()
            await pilot.pause()
            await pilot.press(*"fake-org/tiny", "enter")
            await wait_until(pilot, lambda: table.row_count == 2)
            assert str(status.render()).startswith("done: fake-org/tiny")
            # per file and in total: bytes, rate and ETA, as the CLI prints them
            assert any(
                "model.safetensors  10.0 MiB/24.0 MiB  |  total" in line and "/s  ETA" in line
                for line in lines
            ), lines
            bar = screen.query_one(ProgressBar)
            assert bar.progress == bar.total == len(CONFIG) + 24 * 2**20
            await pilot.press("escape")  # nothing runs: the view closes
            assert not isinstance(pilot.app.screen, ModelsScreen)

    await scenario()


@pytest.mark.anyio
async def test_esc_cancels_a_running_pull_and_keeps_the_view(hub, tmp_path: Path) -> None:
    from textual.widgets import DataTable, Static

    from sparkdeck.ui.models.view import ModelsScreen

    hub.slow["model.safetensors"] = 0.02  # 64 KiB per 20 ms: ~8 s for the whole file

    async def scenario() -> None:
        async with App[None]().run_test(size=(160, 30)) as pilot:
            screen = ModelsScreen({})
            await pilot.app.push_screen(screen)
            await wait_until(pilot, lambda: screen.query_one(DataTable).row_count == 1)
            screen.query_one("#models-pull-input").focus()
            await pilot.pause()
            await pilot.press(*"fake-org/tiny", "enter")
            status = screen.query_one("#models-pull-status", Static)
            try:
                await wait_until(pilot, lambda: str(status.render()).startswith("model.safe"))
            except AssertionError:
                raise AssertionError(repr(str(status.render()))) from None
            await pilot.press("escape")  # the pull stops at huggingface_hub's next chunk
            assert isinstance(pilot.app.screen, ModelsScreen)  # the first Esc cancels only
            try:
                await wait_until(pilot, lambda: str(status.render()).startswith("stopped during"))
            except AssertionError:
                raise AssertionError(str(status.render())) from None
            assert "model.safetensors" in str(status.render())
            assert not screen.pulling
            assert not list((tmp_path / "hub").rglob("model.safetensors"))  # not kept whole
            await pilot.press("escape")
            assert not isinstance(pilot.app.screen, ModelsScreen)

    await scenario()


@pytest.mark.anyio
async def test_o_opens_the_models_view_and_help_lists_it(tmp_path: Path, hub) -> None:
    from sparkdeck.ui.models.view import ModelsScreen
    from sparkdeck.ui.screens.dialogs import HelpScreen
    from tests.support.offline_app import make_app

    app, _ = make_app(tmp_path)

    async def scenario() -> None:
        async with app.run_test(size=(160, 40)) as pilot:
            await pilot.press("o")
            await wait_until(pilot, lambda: isinstance(app.screen, ModelsScreen))
            await pilot.press("escape")
            await pilot.press("question_mark")
            await wait_until(pilot, lambda: isinstance(app.screen, HelpScreen))
            # the key that opened the view, once, with what the view is for
            rows = [what for key, what in app.screen.rows if key == "o"]
            assert rows == [
                "Models: Models on this machine; pull one from the Hub with progress (Esc cancels)"
            ], app.screen.rows

    await scenario()
