"""The comparison screen inside a tiny host app: table, bars, figure and model switching,
and a broken history file ending in the host's one worker-failure handler."""

from __future__ import annotations

from pathlib import Path

import pytest
from textual.widgets import DataTable, Static

from sparkdeck.bench.runner import BenchConfig
from sparkdeck.bench.session import BenchSession
from sparkdeck.bench.store import BenchStore
from sparkdeck.ui.bench.view import BenchCompareScreen, BenchComparison, bar
from tests.support.bench_records import fp, store_run
from tests.support.bench_view_host import Host, settle
from tests.support.pane_host import wait_until
from tests.support.timed_server import running


def test_bars_are_proportional_in_eighths() -> None:
    assert bar(10, 10, 4) == "████"
    assert bar(5, 10, 4) == "██"
    assert bar(1, 8, 1) == "▏" and bar(0, 10, 4) == "" and bar(3, 0, 4) == ""


@pytest.mark.anyio
async def test_comparison_table_bars_and_switching(tmp_path: Path) -> None:
    async def scenario() -> None:
        store = BenchStore(tmp_path / "bench.sqlite3")
        store_run(store, fp("vllm-a"), decode_s=1.0)  # 10 tok/s per request
        store_run(store, fp("llama-b", version="b2"), decode_s=0.5)  # 20 tok/s per request
        store_run(store, fp("big-one", model="big"), decode_s=1.0)
        store_run(store, fp("vllm-a"), decode_s=0.25)  # the newest vllm-a run replaces the first
        app = Host(store)
        async with app.run_test(size=(120, 40)) as pilot:
            view = app.screen.query_one(BenchComparison)
            await settle(pilot, lambda: len(view.runs) == 2)
            table = view.query_one("#bench-table", DataTable)
            assert table.row_count == 2
            rows = [table.get_row_at(i) for i in range(2)]
            assert [r[0] for r in rows] == ["llama-b", "vllm-a"]
            assert [r[2] for r in rows] == ["2", "4"]  # each launch's latest run
            # total output tok/s at c=1: 11 tokens over 0.7 s and 0.45 s
            assert rows[0][4] == "15.7" and rows[1][4] == "24.4"
            title = str(view.query_one("#bench-title", Static).render())
            assert "tiny: total output" in title
            # the key hints read as keys, not as escaped markup ("[\\[ ]] model" before)
            assert title.endswith("m figure  [ ] model") and "\\" not in title
            bars = str(view.query_one("#bench-bars", Static).render())
            assert "concurrency 1" in bars and "concurrency 2" in bars
            lines = [line for line in bars.splitlines() if "tok/s" in line]
            assert lines[1].count("█") > lines[0].count("█")  # vllm-a is faster

            await pilot.press("m")
            await settle(
                pilot,
                lambda: (
                    "decode per request" in str(view.query_one("#bench-title", Static).render())
                ),
            )
            assert [table.get_row_at(i)[4] for i in range(2)] == ["20.0", "40.0"]

            await pilot.press("right_square_bracket")
            await settle(pilot, lambda: view.model == "big")
            assert table.row_count == 1 and table.get_row_at(0)[0] == "big-one"
            await pilot.press("escape")
            await settle(pilot, lambda: not isinstance(app.screen, BenchCompareScreen))
        assert app.failures == []

    await scenario()


@pytest.mark.anyio
async def test_an_empty_history_says_how_to_fill_it(tmp_path: Path) -> None:
    async def scenario() -> None:
        app = Host(BenchStore(tmp_path / "none.sqlite3"))
        async with app.run_test() as pilot:
            view = app.screen.query_one(BenchComparison)
            title = view.query_one("#bench-title", Static)
            await settle(pilot, lambda: "sparkdeck bench" in str(title.render()))

    await scenario()


@pytest.mark.anyio
async def test_a_broken_history_reaches_the_hosts_failure_handler(tmp_path: Path) -> None:
    async def scenario() -> None:
        broken = tmp_path / "bench.sqlite3"
        broken.write_text("garbage" * 500)
        app = Host(BenchStore(broken))
        async with app.run_test() as pilot:
            await settle(pilot, lambda: bool(app.failures))
        assert str(broken) in app.failures[0]

    await scenario()


def timed_session(url: str, runs: int, output_tokens: int):
    def factory(store: BenchStore, on_progress) -> BenchSession:
        config = BenchConfig(
            prompt_tokens=100, output_tokens=output_tokens, concurrency=(1, 2), runs=runs, warmup=0
        )
        return BenchSession(config, url=url, kind="openai", store=store, on_progress=on_progress)

    return factory


@pytest.mark.anyio
async def test_a_benchmark_run_from_the_screen_is_stored_and_shown(tmp_path: Path) -> None:
    async def scenario() -> None:
        app = Host(BenchStore(tmp_path / "bench.sqlite3"), timed_session(url, 1, 40))
        async with app.run_test(size=(120, 40)) as pilot:
            view = app.screen.query_one(BenchComparison)
            progress = app.screen.query_one("#bench-progress", Static)
            await pilot.press("b")
            await settle(pilot, lambda: "benchmark:" in str(progress.render()), tries=200)
            await settle(pilot, lambda: len(view.runs) == 1, tries=400)
            table = view.query_one("#bench-table", DataTable)
            row = table.get_row_at(0)
            assert row[0] == f"openai@{url.split('//')[1]}" and row[3] == "complete"
            assert float(row[4]) > 0 and float(row[5]) > 0
            await settle(pilot, lambda: str(progress.render()).strip() == "")
        assert app.failures == []

    # 40 tok/s: the run takes seconds, so its progress line is on screen long enough to be
    # seen (at 400 tok/s a loaded CI run finished while the key press was still settling)
    with running("usage_end", 20000.0, 40.0) as url:
        await scenario()


@pytest.mark.anyio
async def test_stopping_a_run_from_the_screen_leaves_a_record(tmp_path: Path) -> None:
    store = BenchStore(tmp_path / "bench.sqlite3")

    async def scenario() -> None:
        app = Host(store, timed_session(url, 5, 200))  # ~10 s a request: stopped long before
        async with app.run_test(size=(120, 40)) as pilot:
            progress = app.screen.query_one("#bench-progress", Static)
            await pilot.press("b")
            await settle(pilot, lambda: "concurrency 1" in str(progress.render()), tries=200)
            await pilot.press("x")
            await settle(
                pilot, lambda: bool(store.runs()) and store.runs()[0].status != "running", tries=200
            )
        assert app.failures == []

    with running("usage_end", 20000.0, 20.0) as url:
        await scenario()
    [run] = store.runs()
    assert run.status == "stopped" and run.reason == "stopped from the comparison screen"


@pytest.mark.anyio
async def test_every_key_of_the_view_is_in_an_80_column_footer(tmp_path: Path) -> None:
    """At 80x24 the footer was cut at `x Stop benchma`: Back was not on screen."""

    async def scenario() -> None:
        app = Host(BenchStore(tmp_path / "none.sqlite3"))
        async with app.run_test(size=(80, 24)) as pilot:
            items = ("m Figure", "] Next", "[ Prev", "r Reload", "b Run", "x Stop", "esc Back")

            def footer() -> str:
                return app.screen._compositor.render_strips()[-1].text  # the drawn last row

            # until the footer is drawn (a fixed 0.3 s once found it still blank under load);
            # a footer cut short never holds them all
            await wait_until(
                pilot,
                lambda: all(item in footer() for item in items),
                timeout=10.0,
                what=lambda: f"{items} in the last row, not {footer()!r}",
            )

    await scenario()
