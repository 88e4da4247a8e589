"""The command palette's sparkdeck commands: every key action, and one entry per theme.

The list comes from the app (`palette_commands`), built from the same bindings the footer and
the help screen show, so the three never disagree.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from textual.command import DiscoveryHit, Hit, Hits, Provider


@dataclass(frozen=True)
class PaletteCommand:
    """One palette line: its name, a line of help, and what it runs."""

    name: str
    help: str
    run: Callable[[], Awaitable[None] | None]


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
                yield Hit(score, matcher.highlight(command.name), command.run,
                          help=command.help)
