"""The command palette's sparkdeck commands: every key action, and one entry per theme.

The list comes from the app (`palette_commands`), built from the same bindings the footer and
the help screen show, so the three never disagree.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from functools import partial
from typing import Any

from textual.app import App
from textual.binding import Binding, BindingType
from textual.command import DiscoveryHit, Hit, Hits, Provider


@dataclass(frozen=True)
class PaletteCommand:
    """One palette line: its name, a line of help, and what it runs."""

    name: str
    help: str
    run: Callable[[], object]  # Textual's Hit runs it, and awaits what it returns if awaitable


def without_duplicates(system: Iterable[Any], ours: Iterable[PaletteCommand]) -> Iterator[Any]:
    """Textual's system commands less those sparkdeck already offers under the same name.

    Textual adds "Theme" and "Quit" of its own; sparkdeck has both as key actions (and each
    theme by name), so the palette listed each twice.
    """
    names = {c.name.casefold() for c in ours}
    return (c for c in system if c.title.casefold() not in names)


def key_and_theme_commands(app: App[Any], bindings: Iterable[BindingType]) -> list[PaletteCommand]:
    """Every key action of `bindings`, and each of the app's themes by name."""
    commands = [
        PaletteCommand(b.description, b.tooltip or b.description, partial(app.run_action, b.action))
        for b in bindings
        if isinstance(b, Binding)
    ]
    return commands + [
        PaletteCommand(
            f"Theme: {name}", f"switch to the {name} theme", partial(setattr, app, "theme", name)
        )
        for name in sorted(app.available_themes)
    ]


class SparkdeckCommands(Provider):
    """Offers the app's palette_commands(), fuzzy-matched on their names."""

    def _commands(self) -> list[PaletteCommand]:
        app = self.app
        return app.palette_commands() if hasattr(app, "palette_commands") else []

    async def discover(self) -> Hits:
        for command in self._commands():
            yield DiscoveryHit(command.name, command.run, help=command.help)

    async def search(self, query: str) -> Hits:
        matcher = self.matcher(query)
        for command in self._commands():
            score = matcher.match(command.name)
            if score > 0:
                yield Hit(score, matcher.highlight(command.name), command.run, help=command.help)
