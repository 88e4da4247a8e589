"""Writes that lose nothing (issue 12, items 10 and 12).

Parallel read-modify-writes of shared files take turns; a writer killed mid-write leaves no
temporary file behind for good; a theme change keeps the user's comments; and everything
sparkdeck keeps in its data dir is private (0600 files, 0700 folders). All with real
processes, real signals and the real files.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import tomllib
from pathlib import Path

from sparkdeck.bench.store import BenchStore
from sparkdeck.chat.store import ConversationWriter
from sparkdeck.config import paths
from sparkdeck.config.file_lock import FileLock
from sparkdeck.config.settings import load_settings, save_setting, settings_path
from sparkdeck.endpoints import AttachedRegistry, Endpoint
from sparkdeck.guard.records import save_launch_record
from tests.support.cli import run_cli as shared_run_cli

ROOT = Path(__file__).resolve().parents[2]

# Each worker imports first, then waits for the go file so that all of them hit the registry
# at the same moment; several rounds each widen the window a lost update needs.
_ATTACHER = """
import os, sys, time
from sparkdeck.cli import main
go, me, rounds = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
while not os.path.exists(go):
    time.sleep(0.005)
for r in range(rounds):
    # port 9 (discard) on loopback: nothing answers, so attach records without waiting
    code = main(["attach", f"http://127.0.0.1:9/e{me}-{r}", "--kind", "llamacpp",
                 "--name", f"e{me}-{r}"])
    assert code == 0, code
"""


def run_cli(*args: str) -> tuple[int, str, str]:
    done = shared_run_cli(*args, cwd=ROOT)
    return done.returncode, done.stdout, done.stderr


def _spawn(script: str, *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-c", script, *args],
        cwd=ROOT,
        text=True,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )


def test_parallel_attach_keeps_every_entry(tmp_path: Path) -> None:
    workers, rounds = 10, 3
    go = tmp_path / "go"
    procs = [_spawn(_ATTACHER, str(go), str(i), str(rounds)) for i in range(workers)]
    time.sleep(0.5)
    go.touch()
    outputs = [p.communicate(timeout=240) for p in procs]
    for proc, (out, err) in zip(procs, outputs, strict=False):
        assert proc.returncode == 0, err[-2000:]
        assert out.count("attached ") == rounds
    names = {e.name for e in AttachedRegistry().load()}
    assert names == {f"e{i}-{r}" for i in range(workers) for r in range(rounds)}


_SAVER = """
import sys
from sparkdeck.config.settings import save_setting
save_setting("ui", "theme", "spark-light")
print("saving", flush=True)
while True:
    for theme in ("spark-dark", "spark-light"):
        save_setting("ui", "theme", theme)
"""


def test_writers_killed_mid_write_leave_no_temp_files_behind() -> None:
    """SIGKILLs at varied points of a tight save loop: the next save cleans up after all."""
    path = settings_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text('# mine\n[ui]\ntheme = "spark-dark"\n')
    kills = 30
    for i in range(kills):
        proc = _spawn(_SAVER)
        assert proc.stdout is not None
        assert proc.stdout.readline().strip() == "saving"  # it is in the loop now
        time.sleep(0.002 * (i % 9))
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
    left_by_kills = len(list(path.parent.glob(".settings.toml.*")))
    save_setting("ui", "theme", "spark-light")
    assert sorted(p.name for p in path.parent.glob(".settings.toml.*")) == [], left_by_kills
    assert load_settings().ui.theme == "spark-light"
    assert "# mine" in path.read_text()


def test_leftovers_of_dead_writers_are_removed_and_a_live_writers_kept(tmp_path: Path) -> None:
    """The rule behind the kill test, case by case (a kill may miss the write window)."""
    target = paths.data_dir() / "attached.toml"
    target.parent.mkdir(parents=True)
    dead = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"],
        capture_output=True,
        text=True,
        check=True,
    )
    dead_pid = int(dead.stdout)
    leftovers = {
        f".attached.toml.{dead_pid}.abc123xy.tmp": "dead writer",
        ".attached.toml.k2j3h4g5": "old naming, old",
        f".attached.toml.{os.getppid()}.q1w2e3r4.tmp": "live writer, old",
    }
    for name, text in leftovers.items():
        (target.parent / name).write_text(text)
    fresh = target.parent / f".attached.toml.{os.getppid()}.fresh123.tmp"
    fresh.write_text("a live writer's file, right now")
    aged = time.time() - 2 * paths.STALE_TMP_S
    for name in leftovers:
        if name.endswith("old") or "k2j3" in name or "q1w2" in name:
            os.utime(target.parent / name, (aged, aged))
    paths.atomic_write_text(target, "[x]\n")
    left = sorted(p.name for p in target.parent.glob(".attached.toml.*"))
    assert left == [fresh.name]  # a writer that is alive and recent keeps its file


def test_theme_change_keeps_the_users_comments_and_layout() -> None:
    path = settings_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    original = (
        '# my sparkdeck settings\n\n[ui]\n# dark at night\ntheme = "spark-dark"  '
        "# the default\n\n[guard]\n# careful: this box runs other work\n"
        "warn_available_pct = 15.0\n"
    )
    path.write_text(original)
    save_setting("ui", "theme", "spark-light")
    text = path.read_text()
    for comment in (
        "# my sparkdeck settings",
        "# dark at night",
        "# the default",
        "# careful: this box runs other work",
    ):
        assert comment in text
    assert text == original.replace('"spark-dark"', '"spark-light"')
    assert tomllib.loads(text)["guard"]["warn_available_pct"] == 15.0


def test_theme_save_on_a_missing_file_and_a_new_section() -> None:
    save_setting("guard", "mode", "warn")
    save_setting("ui", "theme", "spark-light")
    settings = load_settings()
    assert (settings.ui.theme, settings.guard.mode) == ("spark-light", "warn")


def test_a_saver_waits_for_the_lock_instead_of_losing_its_change() -> None:
    """A save while another process holds the settings lock lands once the lock is free."""
    holder = FileLock("settings", "test holder")
    holder.acquire()
    saver = _spawn(
        "from sparkdeck.config.settings import save_setting; "
        "save_setting('ui', 'theme', 'spark-light'); print('saved')"
    )
    time.sleep(1.0)
    assert saver.poll() is None, "the save did not wait for the lock"
    holder.release()
    out, err = saver.communicate(timeout=60)
    assert "saved" in out, err
    assert load_settings().ui.theme == "spark-light"


def _mode(path: Path) -> int:
    return path.stat().st_mode & 0o777


def test_everything_in_the_data_dir_is_private(tmp_path: Path) -> None:
    data = paths.data_dir()
    BenchStore().runs(None)  # opening the history creates it
    with ConversationWriter.create(
        {"endpoint": "http://127.0.0.1:9", "kind": "llamacpp", "model": "m"}
    ) as writer:
        writer.user("a private question")
    save_launch_record("0" * 64, "sparkdeck-x", {"preset": "x"})
    AttachedRegistry().add(
        Endpoint("a", "http://127.0.0.1:9", "llamacpp", "/health", "/metrics", "attached")
    )
    conversation_id = writer.conversation_id
    exported = tmp_path / "out" / "conversation.md"
    code, _, err = run_cli("conversations", "export", conversation_id, "-o", str(exported))
    assert code == 0, err
    bench_export = tmp_path / "out" / "bench.csv"
    code, _, err = run_cli("bench", "export", "csv", "-o", str(bench_export))
    assert code == 0, err

    files = [p for p in data.rglob("*") if p.is_file()]
    assert {p.name for p in files} >= {
        "bench.sqlite3",
        "0" * 64 + ".json",
        "attached.toml",
        f"{conversation_id}.jsonl",
    }
    assert {str(p.relative_to(data)): oct(_mode(p)) for p in files if _mode(p) != 0o600} == {}
    folders = [data, *(p for p in data.rglob("*") if p.is_dir())]
    assert {str(p): oct(_mode(p)) for p in folders if _mode(p) != 0o700} == {}
    assert oct(_mode(exported)) == oct(0o600)
    assert oct(_mode(bench_export)) == oct(0o600)


def test_a_data_dir_made_open_by_an_older_version_is_tightened() -> None:
    data = paths.data_dir()
    (data / "conversations").mkdir(parents=True, mode=0o755)
    os.chmod(data, 0o755)
    os.chmod(data / "conversations", 0o755)
    bench = data / "bench.sqlite3"
    BenchStore(bench).runs(None)
    os.chmod(bench, 0o644)
    BenchStore(bench).runs(None)
    with ConversationWriter.create({"model": "m"}):
        pass
    assert oct(_mode(data)) == oct(0o700)
    assert oct(_mode(data / "conversations")) == oct(0o700)
    assert oct(_mode(bench)) == oct(0o600)
