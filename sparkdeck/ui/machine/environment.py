"""The machine tab's environment panel (Docker and the preset files) and the pure function
behind its text.

The panel renders a frozen EnvironmentReport that the app binds to it with
data_bind; the render function is plain so tests can check the words without a terminal.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, replace

from textual.content import Content
from textual.reactive import reactive
from textual.widgets import Static

MAX_PROBLEMS_SHOWN = 3
_LABEL_WIDTH = 9


@dataclass(frozen=True)
class EnvironmentReport:
    """What the environment panel shows; a None field means "not checked yet"."""

    docker_reachable: bool | None = None
    docker_error: str | None = None
    preset_count: int | None = None
    problems: tuple[str, ...] = ()

    def with_presets(self, count: int, problems: Iterable[object]) -> EnvironmentReport:
        """This report after a read of the preset files."""
        return replace(self, preset_count=count, problems=tuple(map(str, problems)))

    def with_docker(self, error: str | None) -> EnvironmentReport:
        """This report after Docker answered (`error` None) or could not be reached."""
        return replace(self, docker_reachable=error is None, docker_error=error)


def _line(label: str, *parts: str | tuple[str, str]) -> Content:
    return Content.assemble((label.ljust(_LABEL_WIDTH), "bold"), *parts, end="\n")


_CHECKING = ("checking…", "$text-muted")


def environment_content(report: EnvironmentReport) -> Content:
    """The environment panel's text: Docker and the preset files, and what is wrong."""
    if report.docker_reachable is None:
        docker = _line("Docker", _CHECKING)
    elif report.docker_reachable:
        docker = _line("Docker", ("reachable", "$success"))
    else:
        docker = _line(
            "Docker", ("unreachable: ", "bold $error"), report.docker_error or "unknown error"
        )
    lines = [docker]

    if report.preset_count is None:
        lines.append(_line("Presets", _CHECKING))
    else:
        count = f"{report.preset_count} loaded"
        if not report.problems:
            lines.append(_line("Presets", count))
        else:
            noun = "problem" if len(report.problems) == 1 else "problems"
            lines.append(
                _line("Presets", count, ", ", (f"{len(report.problems)} {noun}:", "bold $warning"))
            )
            lines += [
                Content.assemble(f"  • {text}", end="\n")
                for text in report.problems[:MAX_PROBLEMS_SHOWN]
            ]
            hidden = len(report.problems) - MAX_PROBLEMS_SHOWN
            if hidden > 0:
                lines.append(Content.assemble((f"  … and {hidden} more", "$text-muted"), end="\n"))
    return Content("").join(lines).rstrip()


class EnvironmentPanel(Static):
    """What sparkdeck needs from this machine besides the GPU: Docker and the preset files."""

    report: reactive[EnvironmentReport] = reactive(EnvironmentReport())

    def on_mount(self) -> None:
        self.border_title = "environment"

    def watch_report(self, report: EnvironmentReport) -> None:
        self.update(environment_content(report))
