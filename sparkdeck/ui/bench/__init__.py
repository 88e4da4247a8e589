"""The benchmark comparison screen (view.py), loaded when it is first opened."""

from __future__ import annotations

from typing import Any

from textual.app import App


def open_benchmarks(app: App[Any]) -> None:
    """Push the comparison screen unless it is already showing. Its module (httpx, SQLite,
    the benchmark store) loads here, at the first `b`, not with the first frame."""
    from sparkdeck.ui.bench.view import BenchCompareScreen

    if not isinstance(app.screen, BenchCompareScreen):
        app.push_screen(BenchCompareScreen())
