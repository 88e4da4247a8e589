"""settings.toml: the user's choices that are not presets (theme, memory-guard thresholds, keys).

The file lives in the config dir; a missing file means the defaults. A bad value is named
with its file and dotted key and the whole file is refused (half-applied settings would be
worse for a safety guard than none). Writes go through `atomic_write_text` under a file lock
and keep every other key and comment the user wrote.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from sparkdeck.config import paths
from sparkdeck.config.keys import check_keys
from sparkdeck.config.schema import FileProblem, Option, check_table
from sparkdeck.config.toml_files import TomlFileError, read_toml

SETTINGS_FILE = "settings.toml"


class SettingsError(ValueError):
    """settings.toml is unreadable or holds bad values; `problems` names each file and key."""

    def __init__(self, problems: list[FileProblem]):
        super().__init__("\n".join(str(p) for p in problems))
        self.problems = problems


@dataclass(frozen=True)
class UiSettings:
    theme: str = "spark-dark"


@dataclass(frozen=True)
class GuardSettings:
    """Memory-guard thresholds (issue 5). Percentages are of MemTotal or of wall time."""

    # "stop" stops sparkdeck's own engine at the stop thresholds; "warn" only warns. Warn-only
    # exists for people who know what they do, and is never the default.
    mode: str = "stop"
    warn_available_pct: float = 10.0
    warn_some_avg10: float = 10.0
    stop_available_pct: float = 5.0
    stop_full_rate_pct: float = 5.0
    stop_consecutive: int = 3
    startup_hz: float = 2.0
    running_hz: float = 1.0
    switch_timeout_s: float = 120.0
    switch_margin_gib: float = 2.0
    sglang_reserve_gib: float = 6.0


@dataclass(frozen=True)
class EndpointSettings:
    """The service's stable OpenAI endpoint (docs/endpoint.md). A host other than loopback
    needs an API key, read from the environment variable named here (never from a file)."""

    host: str = "127.0.0.1"
    port: int = 8400  # not 8888: JupyterLab on a Spark usually holds it
    api_key_env: str = "SPARKDECK_API_KEY"
    # a request naming another preset's model switches the engine (the memory-safe switch,
    # fit check first) while it waits; off, it is refused naming the running model
    switch_on_request: bool = False
    loading_notice: bool = False  # a visible "loading <model>…" reasoning line while waiting
    queue: int = 64  # requests that may wait behind a switch; more get 503 + Retry-After
    switch_flush: bool = True  # a switch on request flushes the page cache when it may
    keepalive_s: float = 3.0  # between SSE comments to a stream waiting for a switch
    # a model that just loaded serves its queue at least this long before the next switch:
    # two clients on two models get batches, not a switch per request (docs/endpoint.md)
    min_hold_s: float = 10.0
    # a launch a front end asks for waits this long at most for the replies the endpoint is
    # streaming from the engine it will stop (a switch never cuts a reply off), then stops it
    finish_replies_s: float = 60.0
    # loopback is open to every user of the machine: true makes the service refuse to start
    # the endpoint without a key, as it does for a LAN address
    require_key_on_loopback: bool = False


@dataclass(frozen=True)
class RecorderSettings:
    """The flight recorder's bounds (sparkdeck.recorder): how long rows are kept, how big the
    file may grow (the oldest rows go first)."""

    keep_days: float = 7.0
    max_mib: int = 256


@dataclass(frozen=True)
class Settings:
    ui: UiSettings = field(default_factory=UiSettings)
    guard: GuardSettings = field(default_factory=GuardSettings)
    endpoint: EndpointSettings = field(default_factory=EndpointSettings)
    recorder: RecorderSettings = field(default_factory=RecorderSettings)
    keys: Mapping[str, str] = field(default_factory=dict)  # [keys]: binding id -> key(s)


_SCHEMA: dict[str, dict[str, Option]] = {
    "ui": {"theme": Option("str", UiSettings.theme, "theme name (see themes/)")},
    "guard": {
        "mode": Option("str", GuardSettings.mode, "stop or warn", choices=("stop", "warn")),
        "warn_available_pct": Option(
            "float",
            GuardSettings.warn_available_pct,
            "warn when MemAvailable is below this % of MemTotal",
            minimum=0.0,
            maximum=100.0,
        ),
        "warn_some_avg10": Option(
            "float",
            GuardSettings.warn_some_avg10,
            "warn when PSI some avg10 is above this",
            minimum=0.0,
            maximum=100.0,
        ),
        "stop_available_pct": Option(
            "float",
            GuardSettings.stop_available_pct,
            "stop the engine below this % MemAvailable",
            minimum=0.0,
            maximum=100.0,
        ),
        "stop_full_rate_pct": Option(
            "float",
            GuardSettings.stop_full_rate_pct,
            "stop when the PSI full stall rate exceeds this %",
            minimum=0.0,
            maximum=100.0,
        ),
        "stop_consecutive": Option(
            "int",
            GuardSettings.stop_consecutive,
            "samples in a row over the full-stall threshold",
            minimum=1,
            maximum=60,
        ),
        "startup_hz": Option(
            "float",
            GuardSettings.startup_hz,
            "samples per second while starting",
            minimum=0.1,
            maximum=20.0,
        ),
        "running_hz": Option(
            "float",
            GuardSettings.running_hz,
            "samples per second once ready",
            minimum=0.1,
            maximum=20.0,
        ),
        "switch_timeout_s": Option(
            "float",
            GuardSettings.switch_timeout_s,
            "longest wait for memory to come back after a stop",
            minimum=0.0,
            maximum=3600.0,
        ),
        "switch_margin_gib": Option(
            "float",
            GuardSettings.switch_margin_gib,
            "how close to the pre-launch MemAvailable counts as back",
            minimum=0.0,
            maximum=128.0,
        ),
        "sglang_reserve_gib": Option(
            "float",
            GuardSettings.sglang_reserve_gib,
            "activation reserve on top of SGLang's static fraction",
            minimum=0.0,
            maximum=128.0,
        ),
    },
    "endpoint": {
        "host": Option(
            "str",
            EndpointSettings.host,
            "address the OpenAI endpoint listens on "
            "(other than 127.0.0.1/::1 only with an API key)",
        ),
        "port": Option(
            "int",
            EndpointSettings.port,
            "TCP port of the OpenAI endpoint",
            minimum=1,
            maximum=65535,
        ),
        "api_key_env": Option(
            "str",
            EndpointSettings.api_key_env,
            "environment variable that holds the endpoint's API key",
        ),
        "switch_on_request": Option(
            "bool",
            EndpointSettings.switch_on_request,
            "a request for another preset's model switches the engine",
        ),
        "loading_notice": Option(
            "bool",
            EndpointSettings.loading_notice,
            "streams waiting for a switch get a visible loading line (reasoning)",
        ),
        "queue": Option(
            "int",
            EndpointSettings.queue,
            "requests that may wait behind a switch (more get 503)",
            minimum=0,
            maximum=4096,
        ),
        "switch_flush": Option(
            "bool",
            EndpointSettings.switch_flush,
            "flush the page cache before a switch on request starts the engine (when allowed)",
        ),
        "keepalive_s": Option(
            "float",
            EndpointSettings.keepalive_s,
            "seconds between the keep-alive comments a stream waiting for a switch gets",
            minimum=0.1,
            maximum=60.0,
        ),
        "min_hold_s": Option(
            "float",
            EndpointSettings.min_hold_s,
            "seconds a model that just loaded serves its queue before the next switch",
            minimum=0.0,
            maximum=3600.0,
        ),
        "finish_replies_s": Option(
            "float",
            EndpointSettings.finish_replies_s,
            "seconds a launch from the CLI or the TUI waits for the replies the endpoint "
            "streams from the engine it stops (0: it does not wait)",
            minimum=0.0,
            maximum=3600.0,
        ),
        "require_key_on_loopback": Option(
            "bool",
            EndpointSettings.require_key_on_loopback,
            "refuse to start the endpoint "
            "on 127.0.0.1/::1 without an API key too (without one, every user of this "
            "machine can use it)",
        ),
    },
}
_SCHEMA["recorder"] = {
    "keep_days": Option(
        "float",
        RecorderSettings.keep_days,
        "days of flight-recorder rows to keep",
        minimum=0.01,
        maximum=366.0,
    ),
    "max_mib": Option(
        "int",
        RecorderSettings.max_mib,
        "largest size of the flight recording in MiB",
        minimum=4,
        maximum=65536,
    ),
}
_CLASSES = {
    "ui": UiSettings,
    "guard": GuardSettings,
    "endpoint": EndpointSettings,
    "recorder": RecorderSettings,
}


def settings_path() -> Path:
    return paths.config_dir() / SETTINGS_FILE


def _read_table(path: Path) -> dict[str, Any]:
    try:
        return read_toml(path, missing_ok=True)
    except TomlFileError as exc:  # not UTF-8, not TOML, nested too deep, unreadable
        raise SettingsError([FileProblem(path, None, exc.reason)]) from None


def parse_settings(table: Mapping[str, Any], path: Path) -> Settings:
    problems: list[FileProblem] = []
    for key in table:
        if key not in _SCHEMA and key != "keys":
            problems.append(
                FileProblem(
                    path,
                    key,
                    "unknown section (allowed: " + ", ".join(sorted([*_SCHEMA, "keys"])) + ")",
                )
            )
    keys: dict[str, str] = {}
    raw_keys = table.get("keys", {})
    if isinstance(raw_keys, Mapping):
        keys, bad_keys = check_keys(raw_keys, path)
        problems += bad_keys
    else:
        problems.append(FileProblem(path, "keys", "must be a table"))
    sections: dict[str, Any] = {}
    for name, schema in _SCHEMA.items():
        raw = table.get(name, {})
        if not isinstance(raw, Mapping):
            problems.append(FileProblem(path, name, "must be a table"))
            continue
        values, bad = check_table(schema, raw, prefix=f"{name}.")
        problems += [FileProblem(path, key, why) for key, why in bad]
        sections[name] = _CLASSES[name](
            **{f.name: values[f.name] for f in fields(_CLASSES[name]) if f.name in values}
        )
    if not problems:
        guard = sections["guard"]
        if guard.stop_available_pct > guard.warn_available_pct:
            problems.append(
                FileProblem(
                    path, "guard.stop_available_pct", "must not be above guard.warn_available_pct"
                )
            )
        if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", sections["endpoint"].api_key_env):
            problems.append(
                FileProblem(path, "endpoint.api_key_env", "must be an environment variable name")
            )
    if problems:
        raise SettingsError(problems)
    return Settings(
        ui=sections["ui"],
        guard=sections["guard"],
        endpoint=sections["endpoint"],
        recorder=sections["recorder"],
        keys=keys,
    )


def load_settings(path: Path | None = None) -> Settings:
    """The user's settings (defaults where the file is silent). Raises SettingsError."""
    path = path or settings_path()
    return parse_settings(_read_table(path), path)


def settings_or_defaults() -> tuple[Settings, str | None]:
    """The user's settings, or the defaults and why the file was refused (the TUI still opens
    and says so)."""
    try:
        return load_settings(), None
    except SettingsError as exc:
        return Settings(), str(exc)


def save_setting(section: str, key: str, value: Any, path: Path | None = None) -> None:
    """Change one key, keep everything else in the file (comments too), write atomically.

    The new value is checked first: a value load_settings would refuse is never written.
    Two sparkdeck processes saving at once take turns (a file lock), so neither change is
    lost; tomlkit edits the document in place, so the user's comments and layout survive.
    """
    import tomlkit  # here: only a save needs it, not every start-up read

    from sparkdeck.config.file_lock import FileLock

    path = path or settings_path()
    with FileLock("settings", "save settings.toml").acquire_or_raise(timeout=30.0):
        table = _read_table(path)
        parse_settings(table, path)  # a file that is already bad is reported, never overwritten
        current = dict(table.get(section, {}))
        current[key] = value
        parse_settings({**table, section: current}, path)
        try:
            document = tomlkit.parse(path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            document = tomlkit.document()
        if section not in document:
            document[section] = tomlkit.table()
        document[section][key] = value
        paths.atomic_write_text(path, tomlkit.dumps(document), mode=0o644)
