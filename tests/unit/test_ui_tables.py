"""Tables are drawn with their full column widths from the first frame.

Textual's DataTable measures auto-width columns on idle, and a frame drawn before that pass
stays cached with every column cut to its label (the dashboard showed "ol" for
"ollama-test" in about one start in five). These tests draw a line before any idle pass runs.
"""

from __future__ import annotations

import pytest
from textual.widgets import DataTable

from sparkdeck.ui.tables import column_widths, cut, fill_table, fit_columns
from tests.support.pane_host import WidgetHost

LABELS = ("id", "image", "kind")
ROWS = [
    ("ollama-test", "ollama/ollama:test", "ollama"),
    ("tiny-llama", "local/llama-server:test", "llama.cpp"),
]


def host() -> WidgetHost:
    """A DataTable alone, with its own default styles."""
    return WidgetHost(DataTable(id="table"), css_path=None)


def test_widths_come_from_the_widest_cell_or_label() -> None:
    assert column_widths(LABELS, ROWS) == [11, 23, 9]
    assert column_widths(("model",), [("x",)]) == [5]
    # Wide characters take two cells each in a terminal.
    assert column_widths(("m",), [("模型模型",)]) == [8]


def test_a_row_with_more_cells_than_columns_is_refused() -> None:
    with pytest.raises(ValueError, match="3 cells for 2 columns"):
        column_widths(("a", "b"), [("1", "2", "3")])


@pytest.mark.anyio
async def test_first_frame_before_any_idle_pass_shows_whole_cells() -> None:
    async def scenario() -> None:
        async with host().run_test(size=(120, 10)) as pilot:
            table = pilot.app.query_one(DataTable)
            fill_table(table, LABELS, ROWS, [row[0] for row in ROWS])
            # No pause: this is the frame a repaint right after the rows arrive would draw.
            first_row = table.render_line(1).text
            assert "ollama-test" in first_row
            assert "ollama/ollama:test" in first_row
            assert table.render_line(2).text.split() == [
                "tiny-llama",
                "local/llama-server:test",
                "llama.cpp",
            ]

    await scenario()


@pytest.mark.anyio
async def test_refilling_replaces_columns_and_rows_and_keys() -> None:
    async def scenario() -> None:
        async with host().run_test(size=(120, 10)) as pilot:
            table = pilot.app.query_one(DataTable)
            fill_table(table, LABELS, ROWS, ["a", "b"])
            fill_table(table, ("engine", "c=1"), [("vllm", "12.5")], ["run-7"])
            await pilot.pause()
            assert [c.label.plain for c in table.ordered_columns] == ["engine", "c=1"]
            assert table.row_count == 1
            assert table.get_row("run-7") == ["vllm", "12.5"]
            assert table.render_line(1).text.split() == ["vllm", "12.5"]

    await scenario()


# ----- columns by priority and width (the preset table at 80, 120 and 200 columns) ---------

PRESET_LABELS = ("id", "claims", "image", "model", "kind")
PRESET_ROWS = [
    (
        "vllm-upstream",
        "18.8 GiB",
        "nvcr.io/nvidia/vllm:26.05.post1-py3",
        "Qwen/Qwen2.5-7B-Instruct",
        "vllm",
    )
]
PRIORITY = ("id", "claims", "model", "image", "kind")


def test_columns_join_whole_by_priority_and_one_takes_the_rest_cut() -> None:
    # (13 + 2) + (8 + 2): id and claims whole; model gets the 13 left (cut), the
    # image and kind stay out rather than every column being cut
    assert fit_columns(PRESET_LABELS, PRESET_ROWS, 40, PRIORITY) == [(0, 13), (1, 8), (3, 13)]
    # wide: everything whole, in table order
    assert fit_columns(PRESET_LABELS, PRESET_ROWS, 200, PRIORITY) == [
        (0, 13),
        (1, 8),
        (2, 35),
        (3, 24),
        (4, 4),
    ]
    # too little room for the next column's minimum: it stays out instead of showing "Q…"
    assert fit_columns(PRESET_LABELS, PRESET_ROWS, 30, PRIORITY) == [(0, 13), (1, 8)]


def test_a_cut_says_so_with_an_ellipsis_and_images_keep_their_tag() -> None:
    assert cut("Qwen/Qwen2.5-7B-Instruct", 11) == "Qwen/Qwen2…"
    assert cut("nvcr.io/nvidia/vllm:26.05.post1-py3", 21, keep_end=True) == "…vllm:26.05.post1-py3"
    assert cut("short", 11) == "short"
    assert cut("模型模型", 5) == "模型…"


@pytest.mark.anyio
async def test_the_table_shows_only_the_columns_that_fit() -> None:
    async def scenario() -> None:
        async with host().run_test(size=(60, 10)) as pilot:
            table = pilot.app.query_one(DataTable)
            fill_table(
                table,
                PRESET_LABELS,
                PRESET_ROWS,
                ["vllm-upstream"],
                width=40,
                priority=PRIORITY,
                keep_end=("image",),
            )
            assert [str(c.label) for c in table.columns.values()] == ["id", "claims", "model"]
            assert table.render_line(1).text.split() == [
                "vllm-upstream",
                "18.8",
                "GiB",
                "Qwen/Qwen2.5…",
            ]

    await scenario()
