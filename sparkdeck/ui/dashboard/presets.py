"""The dashboard's preset table: one row a preset, keyed by preset id."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from textual import work
from textual.message import Message
from textual.widgets import DataTable
from textual.worker import Worker

from sparkdeck.ui.messages import report_worker_failure
from sparkdeck.ui.readers import PresetRow, model_cells
from sparkdeck.ui.tables import fill_table

if TYPE_CHECKING:
    from sparkdeck.presets import Preset

ON_DISK = "on disk"  # the model's size on this machine, filled in by a worker


class PresetTable(DataTable):
    """The presets, one row each; the row key is the preset id."""

    COLUMNS = ("id", "claims", "image", "model", ON_DISK, "kind")
    # What goes first when the table is narrow (sparkdeck.ui.tables.fit_columns); image
    # names are cut at their start, where the registry is, and keep their tag.
    PRIORITY = ("id", "claims", "model", "image", ON_DISK, "kind")

    @dataclass
    class ModelSizesRead(Message):
        """The "on disk" cells, by preset id (posted to the table by its own worker)."""

        cells: dict[str, str]

    def __init__(self, *args: object, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        self._sizes: dict[str, str] = {}
        self._rows: list[PresetRow] = []
        self._fitted_to: int | None = None  # the width the columns were last chosen for

    def on_mount(self) -> None:
        self.cursor_type = "row"
        self.zebra_stripes = True
        self.border_title = "presets"
        fill_table(self, self.COLUMNS, [], [])

    def selected_id(self) -> str | None:
        if not self.row_count:
            return None
        return self.coordinate_to_cell_key(self.cursor_coordinate).row_key.value

    def show_rows(self, rows: list[PresetRow]) -> None:
        """Replace the rows, keeping the cursor on the same preset when it is still there."""
        selected = self.selected_id()
        self._rows, self._fitted_to = rows, self._width()
        at = self.COLUMNS.index(ON_DISK)  # the cell comes from the last scan ("…" until one)
        cells = [(*row[:at], self._sizes.get(row[0], "…"), *row[at:]) for row in rows]
        fill_table(
            self,
            self.COLUMNS,
            cells,
            [row[0] for row in rows],
            width=self._fitted_to,
            priority=self.PRIORITY,
            keep_end=("image",),
        )
        if selected is not None and selected in {row[0] for row in rows}:
            self.move_cursor(row=self.get_row_index(selected))

    @work(
        thread=True,
        exclusive=True,
        group="model sizes",
        name="read model sizes",
        description="look up each preset's model on disk",
        exit_on_error=False,
    )
    def read_model_sizes(self, presets: Sequence[Preset]) -> None:
        """Off the UI thread and after the rows are shown: the first frame never waits for
        a walk of the Hugging Face cache."""
        self.post_message(self.ModelSizesRead(model_cells(presets)))

    def on_preset_table_model_sizes_read(self, message: ModelSizesRead) -> None:
        self._sizes = message.cells
        self.show_rows(self._rows)  # the column may be new, or too narrow now: fit again

    def _width(self) -> int | None:
        """The cells' room: the table's inside, less a scroll bar when rows overflow (None
        before the first layout: every column whole, until the first resize)."""
        return self.scrollable_content_region.width or None

    def on_resize(self) -> None:
        if self._rows and self._width() != self._fitted_to:
            self.show_rows(self._rows)

    def on_worker_state_changed(self, event: Worker.StateChanged) -> None:
        report_worker_failure(self.app, event)  # a widget's worker states do not bubble
