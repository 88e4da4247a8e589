"""Theme files (TOML in themes/ and the user's themes dir) turned into Textual themes.

Each file is checked like a preset: unknown keys, missing colours and malformed values are
reported with the file and key, and a bad file never stops the others from loading.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from textual.app import App
from textual.theme import Theme

from sparkdeck.config import paths
from sparkdeck.config.schema import FileProblem, Option, check_table
from sparkdeck.config.toml_files import TomlFileError, read_toml

_COLOUR = re.compile(r"^#[0-9A-Fa-f]{6}$")
_COLOURS = (
    "primary",
    "secondary",
    "accent",
    "warning",
    "error",
    "success",
    "foreground",
    "background",
    "surface",
    "panel",
)
SCHEMA: dict[str, Option] = {
    "name": Option("str", None, "theme name", required=True),
    "dark": Option("bool", True, "a dark theme"),
    **{c: Option("str", None, f"{c} colour, #RRGGBB", required=c == "primary") for c in _COLOURS},
}


def load_theme(path: Path) -> Theme:
    """Read one theme file; raise ValueError listing every problem (file and key)."""
    try:
        data = read_toml(path)
    except TomlFileError as exc:  # unreadable, not UTF-8, not TOML, nested too deep
        raise ValueError(str(FileProblem(path, None, exc.reason))) from None
    values, problems = check_table(SCHEMA, data)
    for colour in _COLOURS:
        value = values.get(colour)
        if isinstance(value, str) and not _COLOUR.match(value):
            problems.append((colour, f"{value!r} is not a #RRGGBB colour"))
    if problems:
        raise ValueError("\n".join(str(FileProblem(path, k, m)) for k, m in problems))
    return Theme(**{k: v for k, v in values.items() if v is not None})


def load_themes(dirs: list[Path] | None = None) -> tuple[list[Theme], list[str]]:
    """Every theme in the bundled then the user dir (a user theme replaces one by name)."""
    dirs = dirs if dirs is not None else [paths.bundled_themes_dir(), paths.user_themes_dir()]
    themes: dict[str, Theme] = {}
    problems: list[str] = []
    for directory in dirs:
        for path in sorted(directory.glob("*.toml")) if directory.is_dir() else []:
            try:
                theme = load_theme(path)
            except ValueError as exc:
                problems.append(str(exc))
                continue
            themes[theme.name] = theme
    return list(themes.values()), problems


def install_themes(app: App[Any], wanted: str) -> tuple[list[str], list[str]]:
    """Register the theme files with `app` and choose `wanted` (settings.toml ui.theme);
    return the names `t` cycles through and the problems to tell. Called before the
    stylesheet is first parsed (see _preselect)."""
    themes, problems = load_themes()
    for theme in themes:
        app.register_theme(theme)
    names = [theme.name for theme in themes] or [app.theme]
    if wanted in app.available_themes:
        _preselect(app, wanted)
    else:
        problems.append(f"settings.toml: ui.theme: no theme named {wanted!r}")
    return names, problems


def _preselect(app: App[Any], name: str) -> None:
    """Choose the theme before the first styling without Textual's theme watcher, which
    re-parses the whole stylesheet and restyles every widget on the next tick (the first
    frame waited ~30 ms for it). Before the first styling, the value and what the watcher
    derives from it (the app's theme classes, the ANSI colour filter, the stylesheet's
    variables, which it reads when it is first parsed) are all there is."""
    if name == app.theme:
        return
    app.set_reactive(type(app).theme, name)
    dark = app.current_theme.dark
    classes = {c: False for c in app.classes if c.startswith("-theme-")}
    app.update_classes(
        {**classes, f"-theme-{name}": True, "-dark-mode": dark, "-light-mode": not dark},
        update=False,
    )
    app._refresh_truecolor_filter(app.ansi_theme)
    app.stylesheet.set_variables(app.get_css_variables())  # read when it is first parsed


def next_theme(names: list[str], current: str) -> str:
    """The theme after `current` in name order (the first when current is not among them)."""
    ordered = sorted(names)
    if current not in ordered:
        return ordered[0]
    return ordered[(ordered.index(current) + 1) % len(ordered)]


def keep_theme_saved(app: App[Any], saved: str) -> None:
    """Write each theme the user picks to settings.toml [ui] theme, in a thread worker
    (a newer pick replaces a pending write; the theme already saved is not written again)."""
    from sparkdeck.config.settings import save_setting

    last = [saved]

    def save(name: str) -> None:
        if name != last[0]:
            save_setting("ui", "theme", name)
            last[0] = name

    app.theme_changed_signal.subscribe(
        app,
        lambda theme: app.run_worker(
            lambda: save(theme.name),
            thread=True,
            exclusive=True,
            group="settings",
            name="save theme",
            description="keep the theme in settings.toml",
            exit_on_error=False,
        ),
    )
