"""The connect screen (the OpenAI endpoint's URL, models and snippets) and the requests it
forwarded, as the app's `ConnectKeys` mixin: the key's action lives here so app.py stays
wiring. The screen's module (and httpx, the endpoint's settings) load when it first opens.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from textual.app import App


class ConnectKeys:
    """Mixed into SparkdeckApp (before App): `action_connect`."""

    def action_connect(self) -> None:
        from sparkdeck.ui.endpoint.view import ConnectScreen

        app: App[object] = self  # type: ignore[assignment]
        if not isinstance(app.screen, ConnectScreen):
            settings = app.settings.endpoint  # type: ignore[attr-defined]
            loader = app._catalog_loader  # type: ignore[attr-defined]
            app.push_screen(ConnectScreen(settings, loader))
