"""The models view: the library of models on this machine and pulls started from it."""

from __future__ import annotations

from typing import Any

from textual.app import App


def open_models(app: App[Any], preset_models: dict[str, str]) -> None:
    """Push the models view unless it is already showing; `preset_models` maps each preset
    to its model. Its module (huggingface_hub) loads here, when it is first opened."""
    from sparkdeck.ui.models.view import ModelsScreen

    if not isinstance(app.screen, ModelsScreen):
        app.push_screen(ModelsScreen(preset_models))
