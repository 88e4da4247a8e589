"""The main screen's widgets, and the pure functions that turn app state into their text.

The panels render frozen reports (EngineReport, EnvironmentReport) that the app binds to them
with data_bind; the render functions are plain so tests can check the words without a terminal.
"""

from __future__ import annotations

from dataclasses import dataclass

from textual.content import Content
from textual.reactive import reactive
from textual.widgets import DataTable, Static

from sparkdeck.host.meminfo import MemorySnapshot, gib
from sparkdeck.ui.readers import EngineReading, GpuStatus, PresetRow

MAX_PROBLEMS_SHOWN = 3
LOG_LINES_SHOWN = 3
_LABEL_WIDTH = 9


@dataclass(frozen=True)
class EngineReport:
    """What the engine panel shows: the latest reading, or why there is none."""

    reading: EngineReading | None = None  # None until Docker has answered once
    docker_error: str | None = None


@dataclass(frozen=True)
class EnvironmentReport:
    """What the environment panel shows; a None field means "not checked yet"."""

    docker_reachable: bool | None = None
    docker_error: str | None = None
    preset_count: int | None = None
    problems: tuple[str, ...] = ()
    gpu: GpuStatus | None = None
    memory: MemorySnapshot | None = None
    memory_error: str | None = None


def _line(label: str, *parts: str | tuple[str, str]) -> Content:
    return Content.assemble((label.ljust(_LABEL_WIDTH), "bold"), *parts, end="\n")


_CHECKING = ("checking…", "$text-muted")


def engine_content(report: EngineReport) -> Content:
    """The engine panel's text: preset, state, URL, or why no engine can be shown."""
    if report.docker_error is not None:
        return Content.assemble(("Docker unreachable", "bold $error"),
                                ": no engine can be read (see environment)")
    reading = report.reading
    if reading is None:
        return Content.assemble(_CHECKING)
    engine = reading.engine
    if engine is None:
        return Content.assemble(("no engine running", "$text-muted"))
    status = reading.status
    style = ("$success" if status == "ready" else "$error" if engine.crashed
             else "$warning")
    lines = [
        _line("preset", engine.preset_id or "(unlabelled)", (f"  {engine.kind}", "$text-muted")),
        _line("state", (status, f"bold {style}")),
        _line("base_url", engine.base_url),
    ]
    if engine.model:
        lines.append(_line("model", engine.model))
    if engine.crashed and engine.log_tail:
        lines.append(_line("last log"))
        lines += [Content.assemble((f"  {text}", "$text-muted"), end="\n")
                  for text in engine.log_tail[-LOG_LINES_SHOWN:]]
    return Content("").join(lines).rstrip()


def _memory_parts(memory: MemorySnapshot) -> tuple[str, ...]:
    return (f"total {gib(memory.total)} · available {gib(memory.available)} · "
            f"page cache {gib(memory.page_cache)}",)


def environment_content(report: EnvironmentReport) -> Content:
    """The environment panel's text: each prerequisite, and what is missing and why."""
    if report.docker_reachable is None:
        docker = _line("Docker", _CHECKING)
    elif report.docker_reachable:
        docker = _line("Docker", ("reachable", "$success"))
    else:
        docker = _line("Docker", ("unreachable: ", "bold $error"),
                       report.docker_error or "unknown error")
    lines = [docker]

    if report.preset_count is None:
        lines.append(_line("Presets", _CHECKING))
    else:
        count = f"{report.preset_count} loaded"
        if not report.problems:
            lines.append(_line("Presets", count))
        else:
            noun = "problem" if len(report.problems) == 1 else "problems"
            lines.append(_line("Presets", count, ", ",
                               (f"{len(report.problems)} {noun}:", "bold $warning")))
            lines += [Content.assemble(f"  • {text}", end="\n")
                      for text in report.problems[:MAX_PROBLEMS_SHOWN]]
            hidden = len(report.problems) - MAX_PROBLEMS_SHOWN
            if hidden > 0:
                lines.append(Content.assemble((f"  … and {hidden} more", "$text-muted"),
                                              end="\n"))

    if report.gpu is None:
        lines.append(_line("GPU", _CHECKING))
    elif report.gpu.problem:
        lines.append(_line("GPU", (report.gpu.summary, "$warning")))
    else:
        lines.append(_line("GPU", report.gpu.summary))

    if report.memory is not None:
        lines.append(_line("Memory", *_memory_parts(report.memory)))
    elif report.memory_error is not None:
        lines.append(_line("Memory", (report.memory_error, "$error")))
    else:
        lines.append(_line("Memory", _CHECKING))
    return Content("").join(lines).rstrip()


class PresetTable(DataTable):
    """The presets, one row each; the row key is the preset id."""

    COLUMNS = ("id", "title", "kind", "image", "memory")

    def on_mount(self) -> None:
        self.cursor_type = "row"
        self.zebra_stripes = True
        self.border_title = "presets"
        self.add_columns(*self.COLUMNS)

    def show_rows(self, rows: list[PresetRow]) -> None:
        """Replace the rows, keeping the cursor on the same preset when it is still there."""
        selected = None
        if self.row_count:
            selected = self.coordinate_to_cell_key(self.cursor_coordinate).row_key.value
        self.clear()
        for row in rows:
            self.add_row(*row, key=row[0])
        if selected is not None and selected in {row[0] for row in rows}:
            self.move_cursor(row=self.get_row_index(selected))


class EnginePanel(Static):
    """The current sparkdeck engine: preset, state and URL."""

    report: reactive[EngineReport] = reactive(EngineReport())

    def on_mount(self) -> None:
        self.border_title = "engine"

    def watch_report(self, report: EngineReport) -> None:
        self.update(engine_content(report))


class EnvironmentPanel(Static):
    """What sparkdeck needs from this machine, and what is missing."""

    report: reactive[EnvironmentReport] = reactive(EnvironmentReport())

    def on_mount(self) -> None:
        self.border_title = "environment"

    def watch_report(self, report: EnvironmentReport) -> None:
        self.update(environment_content(report))
