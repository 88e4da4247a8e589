"""Filling a DataTable so that its very first frame already has the right column widths, and
choosing which columns fit a given width.

Textual's DataTable sizes auto-width columns on idle after rows arrive, but that pass does not
invalidate its own line cache: a frame drawn between add_row and the idle pass (the app
repaints for any other reason) stays on screen with every column cut to its label's width
until the cursor moves. Measured in the dashboard: about one start in five. Giving each column
an explicit width, measured here from the cells, takes the idle pass out of the picture.
"""

from __future__ import annotations

from collections.abc import Sequence

from rich.cells import cell_len, set_cell_size
from textual.widgets import DataTable

ELLIPSIS = "…"
CELL_GAP = 2  # DataTable pads each cell with one space on either side
MIN_CUT = 8  # a column is never cut narrower than this (or its label): "ghcr.io/…" still says


def cut(text: str, width: int, keep_end: bool = False) -> str:
    """`text` in at most `width` cells; a cut shows an ellipsis, at the end or (keep_end,
    for image names whose tag matters more than their registry) at the start."""
    if cell_len(text) <= width:
        return text
    if width <= 1:
        return ELLIPSIS[:width]
    if keep_end:
        tail = text
        while cell_len(tail) > width - 1:
            tail = tail[1:]
        return ELLIPSIS + tail
    return set_cell_size(text, width - 1).rstrip() + ELLIPSIS


def fit_columns(
    labels: Sequence[str], rows: Sequence[Sequence[str]], width: int, priority: Sequence[str]
) -> list[tuple[int, int]]:
    """Which columns fit in `width` cells and how wide each is: (index, width) in table order.
    Columns join whole in `priority` order (labels not named there come last); the first
    that does not fit whole takes the room left, cut, if that is at least its minimum (its
    label or MIN_CUT) and the rest stay out: one cut column, never every column cut."""
    natural = column_widths(labels, rows)
    rank = {label: place for place, label in enumerate(priority)}
    order = sorted(range(len(labels)), key=lambda i: (rank.get(labels[i], len(rank)), i))
    chosen: dict[int, int] = {}
    room = width
    for index in order:
        if natural[index] + CELL_GAP <= room or not chosen:
            chosen[index] = min(natural[index], max(1, room - CELL_GAP))
            room -= chosen[index] + CELL_GAP
            continue
        least = min(natural[index], max(cell_len(labels[index]), MIN_CUT))
        if room - CELL_GAP >= least:
            chosen[index] = room - CELL_GAP
        break
    return sorted(chosen.items())


def column_widths(labels: Sequence[str], rows: Sequence[Sequence[str]]) -> list[int]:
    """The width each column needs: its widest cell or its label, in terminal cells."""
    widths = [cell_len(label) for label in labels]
    for row in rows:
        if len(row) > len(widths):
            raise ValueError(f"row has {len(row)} cells for {len(widths)} columns: {row!r}")
        for index, cell in enumerate(row):
            widths[index] = max(widths[index], cell_len(cell))
    return widths


def fill_table(
    table: DataTable,
    labels: Sequence[str],
    rows: Sequence[Sequence[str]],
    keys: Sequence[str],
    width: int | None = None,
    priority: Sequence[str] = (),
    keep_end: Sequence[str] = (),
) -> None:
    """Replace the table's columns and rows, each column exactly as wide as its content; with
    `width`, only the columns that fit (fit_columns), their cells cut with an ellipsis
    (at the start for the labels in `keep_end`)."""
    if len(keys) != len(rows):
        raise ValueError(f"{len(keys)} keys for {len(rows)} rows")
    table.clear(columns=True)
    if width is None:
        columns = list(enumerate(column_widths(labels, rows)))
    else:
        columns = fit_columns(labels, rows, width, priority)
    for index, column_width in columns:
        table.add_column(labels[index], width=column_width, key=labels[index])
    for key, row in zip(keys, rows, strict=True):
        table.add_row(
            *(
                cut(row[index], column_width, labels[index] in keep_end)
                for index, column_width in columns
            ),
            key=key,
        )
