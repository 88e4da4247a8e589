"""Benchmark history in SQLite (bench.sqlite3 in the data dir).

A run is recorded as soon as it starts (status "running"), each concurrency level as it
finishes, and the outcome at the end, each step in one transaction: a run that is stopped
or dies half-way still leaves a clear record of what was measured and why it ended. The
process running a run holds a lock on it; a run found "running" with nobody holding its lock
was killed mid-way, and the next run (or `bench history`) marks it "interrupted". The
schema version is SQLite's user_version; a file from a newer sparkdeck is refused rather
than misread.
"""

from __future__ import annotations

import hashlib
import json
import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from sparkdeck.bench.outcome import BenchConfig, BenchOutcome
from sparkdeck.bench.stats import PointSummary, RoundFigures
from sparkdeck.bench.target import LaunchFingerprint
from sparkdeck.config import paths
from sparkdeck.config.file_lock import FileLock

SCHEMA_VERSION = 1
# statements, run one by one inside the transaction that creates the file (BenchStore._migrate)
_SCHEMA = (
    """
CREATE TABLE runs (
    id INTEGER PRIMARY KEY,
    started_at TEXT NOT NULL,
    finished_at TEXT,
    status TEXT NOT NULL,
    reason TEXT,
    model TEXT NOT NULL,
    kind TEXT NOT NULL,
    label TEXT NOT NULL,
    fingerprint_key TEXT NOT NULL,
    fingerprint TEXT NOT NULL,
    config TEXT NOT NULL,
    prompt_plan TEXT,
    peaks TEXT,
    warnings TEXT
)""",
    "CREATE INDEX runs_model ON runs (model, fingerprint_key)",
    """
CREATE TABLE points (
    run_id INTEGER NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
    concurrency INTEGER NOT NULL,
    requests INTEGER NOT NULL,
    errors INTEGER NOT NULL,
    ttft_s REAL,
    decode_tps REAL,
    prefill_tps REAL,
    total_output_tps REAL,
    total_decode_tps REAL,
    summary TEXT NOT NULL,
    requests_detail TEXT NOT NULL,
    PRIMARY KEY (run_id, concurrency)
)""",
)


class BenchStoreError(Exception):
    """The history file cannot be opened or holds a schema this sparkdeck does not know."""


@dataclass(frozen=True)
class StoredPoint:
    """One concurrency level of a stored run; the figures are medians over its requests
    (per request) or its repeats (total)."""

    concurrency: int
    requests: int
    errors: int
    ttft_s: float | None
    decode_tps: float | None
    prefill_tps: float | None
    total_output_tps: float | None
    total_decode_tps: float | None
    summary: dict[str, Any]


@dataclass(frozen=True)
class StoredRun:
    id: int
    started_at: str
    finished_at: str | None
    status: str
    reason: str | None
    fingerprint: LaunchFingerprint
    config: dict[str, Any]
    prompt_plan: dict[str, Any] | None
    peaks: dict[str, Any] | None
    warnings: tuple[str, ...]
    points: tuple[StoredPoint, ...]

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "started_at": self.started_at,
            "finished_at": self.finished_at,
            "status": self.status,
            "reason": self.reason,
            "fingerprint": self.fingerprint.to_dict(),
            "config": self.config,
            "prompt_plan": self.prompt_plan,
            "peaks": self.peaks,
            "warnings": list(self.warnings),
            "points": [{k: getattr(p, k) for k in p.__dataclass_fields__} for p in self.points],
        }


def default_path() -> Path:
    return paths.data_dir() / "bench.sqlite3"


def _loads(text: str | None) -> Any:
    return json.loads(text) if text else None


class BenchStore:
    """The history file; every method opens, works in one transaction and closes."""

    def __init__(self, path: Path | None = None):
        self.path = path or default_path()
        self._locks: dict[int, FileLock] = {}  # runs this process has begun and not finished

    @contextmanager
    def _db(self) -> Iterator[sqlite3.Connection]:
        try:
            paths.private_file(self.path)  # 0600 before SQLite creates it with the umask's mode
            conn = sqlite3.connect(self.path, timeout=10.0)
        except OSError as exc:
            raise BenchStoreError(f"{self.path}: cannot be opened ({exc})") from exc
        except sqlite3.Error as exc:
            raise BenchStoreError(f"{self.path}: cannot be opened ({exc})") from exc
        try:
            conn.execute("PRAGMA foreign_keys = ON")
            self._migrate(conn)
            with conn:  # one transaction: committed on success, rolled back on any error
                yield conn
        except sqlite3.DatabaseError as exc:
            raise BenchStoreError(
                f"{self.path}: {exc} (move the file away to start a new history)"
            ) from exc
        finally:
            conn.close()

    def _migrate(self, conn: sqlite3.Connection) -> None:
        if conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION:
            return
        # Two processes can meet a new file at once (a benchmark starting while the history
        # is read): the write lock first, then the version again, so only one creates it.
        conn.execute("BEGIN IMMEDIATE")
        try:
            version = conn.execute("PRAGMA user_version").fetchone()[0]
            if version > SCHEMA_VERSION:
                raise BenchStoreError(
                    f"{self.path}: written by a newer sparkdeck (schema "
                    f"{version}, this one knows {SCHEMA_VERSION}); not touched"
                )
            if version < SCHEMA_VERSION:
                for statement in _SCHEMA:
                    conn.execute(statement)
                conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
            conn.commit()
        except BaseException:
            conn.rollback()
            raise

    def _run_lock(self, run_id: int) -> FileLock:
        """Held by the process running `run_id` until it records the outcome: the kernel
        drops it when that process dies, however it dies."""
        tag = hashlib.sha1(str(self.path.resolve()).encode()).hexdigest()[:10]
        return FileLock(f"bench-{tag}-{run_id}", f"benchmark run {run_id}")

    def begin_run(self, fp: LaunchFingerprint, config: BenchConfig, started_at: str) -> int:
        self.end_stale_runs()
        with self._db() as conn:
            cur = conn.execute(
                "INSERT INTO runs (started_at, status, model, kind, label, fingerprint_key, "
                "fingerprint, config) VALUES (?, 'running', ?, ?, ?, ?, ?, ?)",
                (
                    started_at,
                    fp.model,
                    fp.kind,
                    fp.label,
                    fp.key,
                    json.dumps(fp.to_dict()),
                    json.dumps(config.to_dict()),
                ),
            )
            run_id = int(cur.lastrowid or 0)
        lock = self._run_lock(run_id)
        if lock.acquire(blocking=False):
            self._locks[run_id] = lock
        return run_id

    def end_stale_runs(self, ended_at: str | None = None) -> list[int]:
        """Mark runs left "running" by a process that is gone (killed mid-way) as ended:
        status "interrupted", what they measured kept. Returns their ids."""
        with self._db() as conn:
            running = [r[0] for r in conn.execute("SELECT id FROM runs WHERE status = 'running'")]
        stale = []
        for run_id in running:
            if run_id in self._locks:
                continue  # this process runs it
            lock = self._run_lock(run_id)
            if lock.acquire(blocking=False):  # nobody holds it: its process has ended
                lock.release()
                stale.append(run_id)
        if stale:
            when = ended_at or datetime.now(UTC).isoformat(timespec="seconds")
            with self._db() as conn:
                conn.executemany(
                    "UPDATE runs SET status = 'interrupted', finished_at = ?, reason = ? "
                    "WHERE id = ? AND status = 'running'",
                    [
                        (
                            when,
                            "ended without an outcome (its process was killed or crashed); "
                            "the levels it finished are kept",
                            run_id,
                        )
                        for run_id in stale
                    ],
                )
        return stale

    def add_point(self, run_id: int, point: PointSummary, rounds: list[RoundFigures]) -> None:
        detail = [{"repeat": rnd.repeat, **r.to_dict()} for rnd in rounds for r in rnd.requests]
        with self._db() as conn:
            conn.execute(
                "INSERT OR REPLACE INTO points VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    run_id,
                    point.concurrency,
                    point.requests,
                    point.errors,
                    point.ttft_s.median,
                    point.decode_tps.median,
                    point.prefill_tps.median,
                    point.total_output_tps.median,
                    point.total_decode_tps.median,
                    json.dumps(point.to_dict()),
                    json.dumps(detail),
                ),
            )

    def finish_run(self, run_id: int, outcome: BenchOutcome) -> None:
        plan = outcome.plan
        with self._db() as conn:
            conn.execute(
                "UPDATE runs SET finished_at = ?, status = ?, reason = ?, prompt_plan = ?, "
                "peaks = ?, warnings = ? WHERE id = ?",
                (
                    outcome.finished_at,
                    outcome.status,
                    outcome.reason,
                    json.dumps(plan.__dict__) if plan else None,
                    json.dumps(outcome.peaks.to_dict()),
                    json.dumps(list(outcome.warnings)),
                    run_id,
                ),
            )
        lock = self._locks.pop(run_id, None)
        if lock is not None:
            lock.release()

    def runs(self, model: str | None = None, limit: int = 200) -> list[StoredRun]:
        """Newest first, optionally for one model."""
        where, args = ("WHERE model = ?", (model,)) if model else ("", ())
        with self._db() as conn:
            rows = conn.execute(
                f"SELECT * FROM runs {where} ORDER BY id DESC LIMIT ?", (*args, limit)
            ).fetchall()
            cols = [d[0] for d in conn.execute("SELECT * FROM runs LIMIT 0").description]
            points: dict[int, list[StoredPoint]] = {r[0]: [] for r in rows}
            for p in conn.execute(
                "SELECT run_id, concurrency, requests, errors, ttft_s, decode_tps, "
                "prefill_tps, total_output_tps, total_decode_tps, summary FROM points "
                "ORDER BY run_id, concurrency"
            ):
                if p[0] in points:
                    points[p[0]].append(
                        StoredPoint(
                            p[1], p[2], p[3], p[4], p[5], p[6], p[7], p[8], json.loads(p[9])
                        )
                    )
        found = []
        for row in rows:
            r = dict(zip(cols, row, strict=False))
            found.append(
                StoredRun(
                    r["id"],
                    r["started_at"],
                    r["finished_at"],
                    r["status"],
                    r["reason"],
                    LaunchFingerprint.from_dict(json.loads(r["fingerprint"])),
                    json.loads(r["config"]),
                    _loads(r["prompt_plan"]),
                    _loads(r["peaks"]),
                    tuple(_loads(r["warnings"]) or ()),
                    tuple(points[r["id"]]),
                )
            )
        return found

    def run(self, run_id: int) -> StoredRun:
        """One stored run by its id."""
        found = [r for r in self.runs(limit=1_000_000) if r.id == run_id]
        if not found:
            raise BenchStoreError(f"{self.path}: no run {run_id}")
        return found[0]

    def models(self) -> list[str]:
        """Models with at least one run, most recently benchmarked first."""
        with self._db() as conn:
            rows = conn.execute("SELECT model FROM runs GROUP BY model ORDER BY MAX(id) DESC")
            return [r[0] for r in rows]

    def comparison(self, model: str) -> list[StoredRun]:
        """For one model, the latest run with figures of each launch fingerprint (preset,
        image, arguments, version), and beside one that is not complete the latest complete
        run of that launch: a failed run never hides the good one before it. What the
        comparison view puts side by side; every run stays in the history."""
        latest: dict[str, StoredRun] = {}
        good: dict[str, StoredRun] = {}
        for run in self.runs(model):  # newest first
            key = run.fingerprint.key
            if run.points and key not in latest:
                latest[key] = run
            if run.points and run.status == "complete" and key not in good:
                good[key] = run
        shown = list(latest.values()) + [
            run for key, run in good.items() if latest[key].id != run.id
        ]
        return sorted(shown, key=lambda r: (r.fingerprint.label, -r.id))

    def request_details(self, run_id: int, concurrency: int) -> list[dict[str, Any]]:
        with self._db() as conn:
            row = conn.execute(
                "SELECT requests_detail FROM points WHERE run_id = ? AND concurrency = ?",
                (run_id, concurrency),
            ).fetchone()
        return json.loads(row[0]) if row else []
