"""Bad input gets one clear message naming the file (and key), never a traceback (issue 12,
items 7 and 9): non-UTF-8 and 100,000-deep TOML in every reader, non-finite numbers, wrong
types in attached.toml, and a reader that closes the pipe (`sparkdeck ... | head`).

Each case runs the real CLI (`python -m sparkdeck ...`) in a subprocess with its own config
and data dirs, as a user would meet it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from sparkdeck.config.settings import SettingsError, load_settings
from sparkdeck.endpoints import AttachedRegistry, EndpointError
from sparkdeck.ui.themes import load_themes

ROOT = Path(__file__).parents[2]
DEEP = "a = " + "[" * 100_000 + "]" * 100_000 + "\n"
NOT_UTF8 = b'[ui]\ntheme = "\xff\xfe spark"\n'
GOOD_PRESET = 'title = "Good"\nkind = "openai"\nimage = "busybox"\n[openai]\ncontainer_port = 80\n'


@pytest.fixture
def dirs(tmp_path: Path) -> dict[str, Path]:
    found = {"config": tmp_path / "config", "data": tmp_path / "data"}
    for path in found.values():
        path.mkdir()
    (found["config"] / "presets").mkdir()
    return found


def _run(
    args: list[str], dirs: dict[str, Path], **kwargs: object
) -> subprocess.CompletedProcess[str]:
    env = {
        **os.environ,
        "SPARKDECK_CONFIG_DIR": str(dirs["config"]),
        "SPARKDECK_DATA_DIR": str(dirs["data"]),
        "DOCKER_HOST": "unix:///nonexistent.sock",
    }
    return subprocess.run(
        [sys.executable, "-m", "sparkdeck", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
        cwd=ROOT,
        **kwargs,
    )


def _no_traceback(done: subprocess.CompletedProcess[str]) -> None:
    assert "Traceback" not in done.stderr and "Error:" not in done.stderr, done.stderr


def test_settings_that_are_not_utf8_or_nested_too_deep_name_the_file(dirs, monkeypatch):
    settings = dirs["config"] / "settings.toml"
    for content, why in ((NOT_UTF8, "is not UTF-8 text"), (DEEP.encode(), "nested too deep")):
        settings.write_bytes(content)
        # the TUI's start-up reads it with load_settings and shows a SettingsError's message
        monkeypatch.setenv("SPARKDECK_CONFIG_DIR", str(dirs["config"]))
        with pytest.raises(SettingsError, match=why) as raised:
            load_settings()
        assert str(settings) in str(raised.value)
        done = _run(["presets"], dirs)  # reads settings for the memory column
        _no_traceback(done)
        assert done.returncode == 0 and "llamacpp" in done.stdout  # the table still shows
        guard = _run(["guard", "--duration", "1"], dirs)  # its thresholds live there
        _no_traceback(guard)
        assert guard.returncode == 1 and f"sparkdeck: {settings}: " in guard.stderr


def test_one_deep_preset_breaks_only_itself(dirs):
    presets = dirs["config"] / "presets"
    (presets / "deep.toml").write_text(DEEP)
    (presets / "good.toml").write_text(GOOD_PRESET)
    listed = _run(["presets", "--json"], dirs)
    _no_traceback(listed)
    report = json.loads(listed.stdout)
    assert "good" in [p["id"] for p in report["presets"]]
    assert report["problems"] == [
        f"{presets / 'deep.toml'}: is not valid TOML: tables or arrays nested too deep"
    ]
    validated = _run(["presets", "validate"], dirs)
    _no_traceback(validated)
    assert validated.returncode == 1 and "1 problem(s)" in validated.stdout
    launched = _run(["launch", "good", "--no-flush", "--yes"], dirs)
    _no_traceback(launched)  # it gets as far as Docker, which is not there
    assert "cannot reach the Docker daemon" in launched.stderr


@pytest.mark.parametrize("value", ["inf", "-inf", "nan", "1e300"])
def test_memory_gib_must_be_finite_and_in_range(dirs, value):
    path = dirs["config"] / "presets" / "big.toml"
    path.write_text(GOOD_PRESET + f"memory_gib = {value}\n")
    validated = _run(["presets", "validate", str(path)], dirs)
    _no_traceback(validated)
    assert validated.returncode == 1
    assert f"{path}: openai.memory_gib: " in validated.stderr
    listed = _run(["presets", "--json"], dirs)
    _no_traceback(listed)
    assert len(json.loads(listed.stdout)["presets"]) >= 1  # the bundled ones still list


def test_a_deep_or_undecodable_theme_is_reported_and_the_others_load(tmp_path):
    (tmp_path / "deep.toml").write_text(DEEP)
    (tmp_path / "bytes.toml").write_bytes(b'name = "\xff"\n')
    (tmp_path / "fine.toml").write_text('name = "fine"\nprimary = "#112233"\n')
    themes, problems = load_themes([tmp_path])
    assert [t.name for t in themes] == ["fine"]
    assert any(
        "deep.toml: is not valid TOML: tables or arrays nested too deep" in p for p in problems
    )
    assert any("bytes.toml: is not UTF-8 text" in p for p in problems)


@pytest.mark.parametrize(
    "row, key",
    [
        ('name = "a"\nurl = "http://127.0.0.1:1"\nkind = 5\n', "engine[0].kind"),
        ('name = "a"\nurl = 5\nkind = "vllm"\n', "engine[0].url"),
        ('name = "a"\nurl = "http://127.0.0.1:1"\nkind = "nope"\n', "engine[0].kind"),
        ('url = "http://127.0.0.1:1"\nkind = "vllm"\n', "engine[0] lacks name"),
    ],
)
def test_attached_rows_with_wrong_types_name_the_row_and_key(dirs, row, key):
    path = dirs["data"] / "attached.toml"
    path.write_text("[[engine]]\n" + row)
    with pytest.raises(EndpointError, match=key.replace("[", r"\[").replace("]", r"\]")):
        AttachedRegistry(path).load()
    status = _run(["status", "--json"], dirs)
    _no_traceback(status)
    assert key in json.loads(status.stdout)["attached_error"]
    chat = _run(["chat", "hi"], dirs)
    _no_traceback(chat)
    assert chat.returncode == 1 and str(path) in chat.stderr


@pytest.mark.parametrize(
    "content",
    [DEEP.encode(), b"engine = 5\n", b"\xff\xfe"],
    ids=["nested-too-deep", "engine-not-a-list", "not-utf8"],
)
def test_a_broken_attached_file_is_one_message(dirs, content):
    (dirs["data"] / "attached.toml").write_bytes(content)
    status = _run(["status", "--json"], dirs)
    _no_traceback(status)
    assert "attached.toml" in json.loads(status.stdout)["attached_error"]


@pytest.mark.parametrize("args", [["presets"], ["presets", "--json"]])
def test_a_closed_pipe_ends_quietly(dirs, args):
    """`sparkdeck presets | head -0`: the reader is gone before the first write."""
    read_end, write_end = os.pipe()
    os.close(read_end)  # nobody will ever read: the first write meets EPIPE
    try:
        env = {
            **os.environ,
            "SPARKDECK_CONFIG_DIR": str(dirs["config"]),
            "SPARKDECK_DATA_DIR": str(dirs["data"]),
        }
        done = subprocess.run(
            [sys.executable, "-m", "sparkdeck", *args],
            stdout=write_end,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
            timeout=60,
            cwd=ROOT,
        )
    finally:
        os.close(write_end)
    assert "Traceback" not in done.stderr and "BrokenPipe" not in done.stderr, done.stderr
    assert done.stderr == ""


def test_a_claim_that_cannot_be_computed_leaves_the_preset_table_whole(dirs):
    """A figure that slips past the schema (a GGUF header with absurd sizes, say) makes one
    preset's claim unknown; the TUI's table and `presets` keep every row."""
    import dataclasses

    from sparkdeck.catalog import PresetCatalog
    from sparkdeck.config.settings import GuardSettings
    from sparkdeck.presets import load_file
    from sparkdeck.ui.readers import preset_rows

    good = load_file(_write(dirs, "good", GOOD_PRESET + "memory_gib = 10.0\n"))
    broken = dataclasses.replace(
        good, id="broken", options={**good.options, "memory_gib": float("inf")}
    )
    catalog = PresetCatalog({"good": good, "broken": broken})
    rows = preset_rows(catalog, total=128 * 2**30, guard=GuardSettings())
    assert [(r[0], r[1]) for r in rows] == [("broken", "unknown"), ("good", "~10.0 GiB")]


def _write(dirs: dict[str, Path], name: str, text: str) -> Path:
    path = dirs["config"] / "presets" / f"{name}.toml"
    path.write_text(text)
    return path


def test_a_conversation_file_with_hostile_lines_loads_lists_and_exports(dirs):
    """A saved conversation edited by hand (or by something else): a line nested 100,000
    deep, bytes that are not UTF-8 and figures of the wrong types are skipped or shown as
    unknown; `conversations` and `conversations export` still work."""
    from sparkdeck.chat.store import ConversationWriter

    directory = dirs["data"] / "conversations"
    with ConversationWriter.create({"model": "m"}, directory) as writer:
        writer.user("hi")
        writer.reply_started("m", {})
        writer.content("hello")
        writer.reply_ended({"ttft_s": "soon", "client_tps": [1], "completion_tokens": "x"})
        path = writer.path
    with path.open("ab") as fh:
        fh.write(b'{"type": "delta", "content": "\xff\xfe"}\n')
        fh.write(b'{"type": "reply_end", "figures": 5, "error": 7}\n')
        fh.write(b"[" * 100_000 + b"]" * 100_000 + b"\n")
    listed = _run(["conversations", "--json"], dirs)
    _no_traceback(listed)
    assert [c["turns"] for c in json.loads(listed.stdout)] == [2]
    exported = _run(["conversations", "export", path.stem], dirs)
    _no_traceback(exported)
    assert exported.returncode == 0 and "hello" in exported.stdout


def test_toml_nesting_is_measured_before_tomllib_recurses(monkeypatch, tmp_path):
    """A file nested past MAX_DEPTH is refused before tomllib's recursive parser runs: at
    that depth a garbage collection calls finalizers that then fail too (a urllib3 pool's
    printed a RecursionError traceback from `status` in CI)."""
    import tomllib

    from sparkdeck.config.toml_files import MAX_DEPTH, TomlFileError, nesting, parse_toml

    assert nesting("a = 1\n[x]\nb = [1, [2, {c = [3]}]]\n[[t]]\n") == 4
    assert nesting('s = "[[[["\nt = \'{{{{\'\n# [[[[\nu = """ [[ \\" ]]"""\n') == 0
    deep = ("a = " + "[" * (MAX_DEPTH + 1) + "]" * (MAX_DEPTH + 1)).encode()

    def not_called(text: str) -> None:
        raise AssertionError("tomllib was asked to parse a file nested too deep")

    monkeypatch.setattr(tomllib, "loads", not_called)
    with pytest.raises(TomlFileError, match="nested too deep"):
        parse_toml(deep, tmp_path / "deep.toml")
