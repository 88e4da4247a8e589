"""The full-screen views the dashboard's keys open over it, by name: `open('bench')` and the
like in sparkdeck.ui.keymap run `open_view`. Each view's module loads when it first opens, so
none of them costs the first frame anything, and app.py holds one action instead of five.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from sparkdeck.ui.app import SparkdeckApp


def _help(app: SparkdeckApp) -> None:
    from sparkdeck.ui.screens.dialogs import open_help

    open_help(app, app.BINDINGS, app.settings.keys)


def _bench(app: SparkdeckApp) -> None:
    from sparkdeck.ui.bench import open_benchmarks

    open_benchmarks(app)


def _models(app: SparkdeckApp) -> None:
    from sparkdeck.ui.models import open_models

    open_models(app, {p.id: p.model for p in app.catalog.presets.values()})


def _connect(app: SparkdeckApp) -> None:
    from sparkdeck.ui.endpoint import open_connect

    open_connect(app, app.settings.endpoint, app.catalog_loader)


VIEWS: dict[str, Callable[[SparkdeckApp], None]] = {
    "help": _help,
    "bench": _bench,
    "models": _models,
    "connect": _connect,
    "history": lambda app: app.flight_history.open(),
}


def open_view(app: SparkdeckApp, view: str) -> None:
    """Push the view named `view` (a key of VIEWS) unless it is the one already shown."""
    VIEWS[view](app)
