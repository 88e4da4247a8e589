"""The connect screen (the OpenAI endpoint's URL, models and snippets) and the requests it
forwarded: `open_connect` is the key's action, so app.py stays wiring. The screen's module
(and httpx, the endpoint's settings) load when it first opens.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from textual.app import App

    from sparkdeck.catalog import PresetCatalog
    from sparkdeck.config.settings import EndpointSettings


def open_connect(
    app: App[Any], settings: EndpointSettings, catalog_loader: Callable[[], PresetCatalog]
) -> None:
    """Push the connect screen unless it is already the one shown."""
    from sparkdeck.ui.endpoint.view import ConnectScreen

    if not isinstance(app.screen, ConnectScreen):
        app.push_screen(ConnectScreen(settings, catalog_loader))
