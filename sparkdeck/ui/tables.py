"""Filling a DataTable so that its very first frame already has the right column widths.

Textual's DataTable sizes auto-width columns on idle after rows arrive, but that pass does not
invalidate its own line cache: a frame drawn between add_row and the idle pass (the app
repaints for any other reason) stays on screen with every column cut to its label's width
until the cursor moves. Measured in the dashboard: about one start in five. Giving each column
an explicit width, measured here from the cells, takes the idle pass out of the picture.
"""

from __future__ import annotations

from collections.abc import Sequence

from rich.cells import cell_len
from textual.widgets import DataTable


def column_widths(labels: Sequence[str], rows: Sequence[Sequence[str]]) -> list[int]:
    """The width each column needs: its widest cell or its label, in terminal cells."""
    widths = [cell_len(label) for label in labels]
    for row in rows:
        if len(row) > len(widths):
            raise ValueError(f"row has {len(row)} cells for {len(widths)} columns: {row!r}")
        for index, cell in enumerate(row):
            widths[index] = max(widths[index], cell_len(cell))
    return widths


def fill_table(table: DataTable, labels: Sequence[str], rows: Sequence[Sequence[str]],
               keys: Sequence[str]) -> None:
    """Replace the table's columns and rows, each column exactly as wide as its content."""
    if len(keys) != len(rows):
        raise ValueError(f"{len(keys)} keys for {len(rows)} rows")
    table.clear(columns=True)
    for label, width in zip(labels, column_widths(labels, rows), strict=True):
        table.add_column(label, width=width, key=label)
    for key, row in zip(keys, rows, strict=True):
        table.add_row(*row, key=key)
