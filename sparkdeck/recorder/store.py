"""The flight recorder: 1 Hz telemetry rows in SQLite that survive a kill, a freeze or a
power cut, bounded by age and size, and a post-mortem after an unclean end.

Why SQLite in WAL mode with a commit every few seconds (docs/recorder.md has the figures):
rows are buffered in memory and written in one transaction every `commit_s` seconds with
`synchronous=FULL`, so the WAL is fsynced at each commit: a power cut or a kill -9 loses at
most the rows since the last commit (~`commit_s` + one sample). One fsync per few seconds
costs little CPU and little flash wear; an fsync per row would cost both for nothing the
owner needs. Readers (`sparkdeck history`, the TUI) read while the service writes, which WAL
allows without blocking either side. Retention deletes rows older than `keep_days`; a size
cap deletes the oldest rows beyond `max_bytes`, and incremental auto-vacuum hands the freed
pages back so the file shrinks too.

A session row marks each recording: `clean_stop_at` is written by `close()`. `open()` finds
the previous session without that mark, judges its last ten minutes (sparkdeck.recorder.
postmortem) and writes the post-mortem to a file and to the `postmortems` table. The boot id
(/proc/sys/kernel/random/boot_id; injectable so a test can simulate a reboot) tells a machine
that restarted mid-recording from a process that was killed while the machine ran on.
"""

from __future__ import annotations

import hashlib
import json
import os
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from sparkdeck.config import paths
from sparkdeck.config.file_lock import FileLock
from sparkdeck.config.settings import GuardSettings
from sparkdeck.recorder.postmortem import WINDOW_S, PostMortem, judge
from sparkdeck.recorder.rows import COLUMNS, RecordedSample, column_sql, from_row
from sparkdeck.telemetry.sampler import TelemetrySnapshot

if TYPE_CHECKING:
    from sparkdeck.config.settings import RecorderSettings

SCHEMA_VERSION = 1
# Rows kept in memory while the disk refuses them (full, gone read-only): the newest ten
# minutes, so a short outage loses nothing and a long one cannot eat the service's memory.
MAX_PENDING = 600
BOOT_ID = Path("/proc/sys/kernel/random/boot_id")
DB_NAME = "flight-recorder.sqlite"


class RecorderError(Exception):
    """The recording cannot be opened or read (corrupt file, other schema, no permission)."""


class RecorderBusy(RecorderError):
    """Another process records into the same file."""


@dataclass(frozen=True)
class RecorderLimits:
    keep_days: float = 7.0  # settings.toml [recorder] keep_days
    max_bytes: int = 256 * 2**20  # settings.toml [recorder] max_mib; 7 days at 1 Hz ~ 120 MiB
    commit_s: float = 3.0  # at most this much (plus one sample) is lost to a power cut
    prune_s: float = 3600.0  # how often old rows are deleted while recording

    @classmethod
    def from_settings(cls, settings: RecorderSettings) -> RecorderLimits:
        return cls(keep_days=settings.keep_days, max_bytes=settings.max_mib * 2**20)


def default_path() -> Path:
    return paths.data_dir() / DB_NAME


def read_boot_id(path: Path = BOOT_ID) -> str:
    """This boot's id; "unknown" where the kernel does not say (then no reboot is seen)."""
    try:
        return path.read_text(encoding="ascii").strip() or "unknown"
    except OSError:
        return "unknown"


def db_size(path: Path) -> int:
    """Bytes on disk: the database and its write-ahead log."""
    total = 0
    for part in (path, path.with_name(path.name + "-wal")):
        try:
            total += part.stat().st_size
        except FileNotFoundError:
            pass
    return total


_SCHEMA = f"""
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT);
CREATE TABLE IF NOT EXISTS samples ({column_sql()});
CREATE INDEX IF NOT EXISTS samples_t ON samples (t);
CREATE TABLE IF NOT EXISTS sessions (
    id INTEGER PRIMARY KEY, boot_id TEXT, pid INTEGER, started_at REAL, last_at REAL,
    clean_stop_at REAL);
CREATE TABLE IF NOT EXISTS postmortems (
    id INTEGER PRIMARY KEY, session_id INTEGER, written_at REAL, ended_at REAL,
    verdict TEXT, report TEXT, file TEXT);
"""


def connect(path: Path, *, read_only: bool = False) -> sqlite3.Connection:
    """A connection with the recorder's pragmas; read-only for `sparkdeck history`."""
    try:
        if read_only:
            db = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=5.0)
        else:
            db = sqlite3.connect(path, timeout=5.0, check_same_thread=False)
            db.execute("PRAGMA auto_vacuum = INCREMENTAL")  # only takes effect on a new file
            db.execute("PRAGMA journal_mode = WAL")
            db.execute("PRAGMA synchronous = FULL")  # fsync the WAL at each commit
            # the WAL is part of the size bound: checkpoint at 1 MiB, and truncate back to it
            db.execute("PRAGMA wal_autocheckpoint = 256")
            db.execute("PRAGMA journal_size_limit = 1048576")
        return db
    except sqlite3.Error as exc:
        raise RecorderError(
            f"{path}: cannot open the flight recording ({exc}); if it is "
            "damaged, move it away to start a new one"
        ) from None


class FlightRecorder:
    """Writes rows; open with `FlightRecorder.open(path)`, end with `close()`."""

    def __init__(
        self,
        db: sqlite3.Connection,
        path: Path,
        lock: FileLock,
        session_id: int,
        limits: RecorderLimits,
        wall: Callable[[], float],
    ) -> None:
        self.path = path
        self.limits = limits
        self.session_id = session_id
        self._db = db
        self._lock = lock
        self._wall = wall
        self._pending: list[RecordedSample] = []
        self._guard = threading.Lock()  # record() in the sampling thread, close() elsewhere
        now = wall()
        self._last_commit = now
        self._last_prune = now
        self._closed = False

    @classmethod
    def open(
        cls,
        path: Path | None = None,
        *,
        limits: RecorderLimits = RecorderLimits(),
        boot_id: Callable[[], str] = read_boot_id,
        wall: Callable[[], float] = time.time,
        guard: GuardSettings = GuardSettings(),
        postmortem_dir: Path | None = None,
    ) -> tuple[FlightRecorder, PostMortem | None]:
        """Start a recording session; the post-mortem of the previous one if it ended
        uncleanly (also written to `postmortem_dir`, default: postmortems/ beside the file)."""
        path = path or default_path()
        paths.private_file(path)
        key = hashlib.sha1(str(path.resolve()).encode()).hexdigest()[:12]
        lock = FileLock(f"recorder-{key}", f"flight recorder {path}")
        if not lock.acquire(blocking=False):
            holder = lock.holder()
            raise RecorderBusy(
                f"{path}: already being recorded by "
                + (holder.describe() if holder else "another process")
            )
        try:
            db = connect(path)
            this_boot = boot_id()
            postmortem = _setup_and_judge(
                db, path, this_boot, guard, postmortem_dir or path.parent / "postmortems", wall
            )
            cur = db.execute(
                "INSERT INTO sessions (boot_id, pid, started_at) VALUES (?, ?, ?)",
                (this_boot, os.getpid(), wall()),
            )
            db.commit()
        except sqlite3.Error as exc:
            lock.release()
            raise RecorderError(
                f"{path}: the flight recording is unusable ({exc}); move it away to start a new one"
            ) from None
        except BaseException:
            lock.release()
            raise
        recorder = cls(db, path, lock, int(cur.lastrowid or 0), limits, wall)
        recorder.prune()
        return recorder, postmortem

    def record(
        self,
        sample: TelemetrySnapshot,
        engine_state_text: str | None = None,
        tok_s: float | None = None,
    ) -> RecordedSample:
        """Keep one telemetry sample; committed with the others every `commit_s` seconds."""
        row = RecordedSample.from_snapshot(sample, self._wall(), engine_state_text, tok_s)
        self.add(row)
        return row

    def add(self, row: RecordedSample) -> None:
        """Keep a row as it is (`record` builds it from a sample; tests write old rows)."""
        with self._guard:
            if self._closed:
                raise RecorderError(f"{self.path}: the recorder is closed")
            self._pending.append(row)
            del self._pending[:-MAX_PENDING]
            now = self._wall()
            # abs(): a wall clock set back (NTP after boot) must not stop the commits
            if abs(now - self._last_commit) >= self.limits.commit_s:
                with self._writing():
                    self._flush(now)
            if abs(now - self._last_prune) >= self.limits.prune_s:
                with self._writing():
                    self._prune(now)

    @contextmanager
    def _writing(self) -> Iterator[None]:
        """SQLite's errors (disk full, file gone read-only) as RecorderError naming the file;
        the rows stay pending for the next commit."""
        try:
            yield
        except sqlite3.Error as exc:
            try:
                self._db.rollback()
            except sqlite3.Error:
                pass
            raise RecorderError(f"{self.path}: cannot write the flight recording ({exc})") from None

    def flush(self) -> None:
        with self._guard, self._writing():
            self._flush(self._wall())

    def _flush(self, now: float) -> None:
        self._last_commit = now
        if not self._pending:
            return
        marks = ", ".join("?" for _ in COLUMNS)
        self._db.executemany(
            f"INSERT INTO samples ({', '.join(COLUMNS)}) VALUES ({marks})",
            [row.as_tuple() for row in self._pending],
        )
        self._db.execute(
            "UPDATE sessions SET last_at = ? WHERE id = ?", (self._pending[-1].t, self.session_id)
        )
        self._db.commit()
        self._pending.clear()

    def prune(self) -> int:
        """Delete rows past retention or beyond the size cap; how many went."""
        with self._guard, self._writing():
            return self._prune(self._wall())

    def _prune(self, now: float) -> int:
        self._last_prune = now
        self._flush(now)
        db = self._db
        gone = db.execute(
            "DELETE FROM samples WHERE t < ?", (now - self.limits.keep_days * 86400.0,)
        ).rowcount
        db.commit()
        for _ in range(50):  # each pass drops a tenth of the rows: bounded work
            if self._used_bytes() <= self.limits.max_bytes:
                break
            count = db.execute("SELECT count(*) FROM samples").fetchone()[0]
            if not count:
                break
            gone += db.execute(
                "DELETE FROM samples WHERE rowid IN (SELECT rowid FROM samples ORDER BY t LIMIT ?)",
                (max(1, count // 10),),
            ).rowcount
            db.commit()
        if gone:
            db.execute("PRAGMA incremental_vacuum")
            db.commit()
            db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        return gone

    def _used_bytes(self) -> int:
        db = self._db
        pages = db.execute("PRAGMA page_count").fetchone()[0]
        free = db.execute("PRAGMA freelist_count").fetchone()[0]
        return (pages - free) * db.execute("PRAGMA page_size").fetchone()[0]

    def close(self) -> None:
        """Commit what is pending and write the clean-stop mark. Idempotent."""
        with self._guard:
            if self._closed:
                return
            self._closed = True
            try:
                with self._writing():
                    self._flush(self._wall())
                    self._db.execute(
                        "UPDATE sessions SET clean_stop_at = ? WHERE id = ?",
                        (self._wall(), self.session_id),
                    )
                    self._db.commit()
                    self._db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
            finally:
                self._db.close()
                self._lock.release()

    def __enter__(self) -> FlightRecorder:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _setup_and_judge(
    db: sqlite3.Connection,
    path: Path,
    this_boot: str,
    guard: GuardSettings,
    folder: Path,
    wall: Callable[[], float],
) -> PostMortem | None:
    db.executescript(_SCHEMA)
    found = db.execute("SELECT value FROM meta WHERE key = 'schema'").fetchone()
    if found is None:
        db.execute("INSERT INTO meta VALUES ('schema', ?)", (str(SCHEMA_VERSION),))
    elif found[0] != str(SCHEMA_VERSION):
        raise RecorderError(
            f"{path}: schema {found[0]}, this sparkdeck writes "
            f"{SCHEMA_VERSION}; move the file away to start a new recording"
        )
    db.commit()
    last = db.execute(
        "SELECT id, boot_id, started_at FROM sessions WHERE clean_stop_at IS NULL "
        "AND id = (SELECT max(id) FROM sessions)"
    ).fetchone()
    if last is None:
        return None
    session_id, boot, started_at = last
    end = db.execute("SELECT max(t) FROM samples WHERE t >= ?", (started_at,)).fetchone()[0]
    rows = (
        []
        if end is None
        else [
            from_row(r)
            for r in db.execute(
                f"SELECT {', '.join(COLUMNS)} FROM samples WHERE t >= ? AND t >= ? ORDER BY t",
                (started_at, end - WINDOW_S),
            )
        ]
    )
    rebooted = boot != this_boot and "unknown" not in (boot, this_boot)
    postmortem = judge(rows, started_at, rebooted, guard)
    written = wall()
    name = time.strftime("postmortem-%Y%m%d-%H%M%S.txt", time.localtime(written))
    file = folder / name
    paths.atomic_write_text(file, postmortem.text() + "\n")
    db.execute(
        "INSERT INTO postmortems (session_id, written_at, ended_at, verdict, report, "
        "file) VALUES (?, ?, ?, ?, ?, ?)",
        (
            session_id,
            written,
            postmortem.ended_at,
            postmortem.verdict,
            json.dumps(postmortem.to_dict()),
            str(file),
        ),
    )
    # the session is judged: mark it so the next open does not judge it again
    db.execute("UPDATE sessions SET clean_stop_at = -1 WHERE id = ?", (session_id,))
    db.commit()
    return postmortem
