"""The SQLite history: records survive partial runs, the schema version is checked, the
comparison picks the latest run per launch, and the exports carry the figures."""

from __future__ import annotations

import csv
import io
import json
import sqlite3
import threading
from pathlib import Path

import pytest

from sparkdeck.bench.report import to_csv, to_json
from sparkdeck.bench.stats import summarise_point
from sparkdeck.bench.store import SCHEMA_VERSION, BenchStore, BenchStoreError, default_path
from sparkdeck.bench.target import LaunchFingerprint, fingerprint
from sparkdeck.endpoints import Endpoint
from sparkdeck.runtime.state import EngineState
from tests.support.bench_records import CONFIG, fp, rounds, store_run


def test_runs_round_trip_with_points_and_details() -> None:
    store = BenchStore()
    assert store.path == default_path() and not store.runs()
    run_id = store_run(store, fp("llamacpp"), decode_s=1.0)
    [run] = store.runs()
    assert (run.id, run.status, run.fingerprint, run.warnings) == (
        run_id,
        "complete",
        fp("llamacpp"),
        ("a warning",),
    )
    assert [p.concurrency for p in run.points] == [1, 2]
    assert run.points[0].decode_tps == pytest.approx(10.0)
    assert run.points[1].total_decode_tps == pytest.approx(20.0)
    assert run.peaks["min_available_bytes"] == 7 and run.prompt_plan["total_tokens"] == 100
    assert len(store.request_details(run_id, 2)) == 2


def test_a_run_that_never_finished_stays_on_record_as_running() -> None:
    store = BenchStore()
    run_id = store.begin_run(fp("p"), CONFIG, "2026-01-01T00:00:00+00:00")
    r = rounds(1, 1.0)
    store.add_point(run_id, summarise_point(1, r), r)
    [run] = store.runs()
    assert run.status == "running" and run.finished_at is None and len(run.points) == 1


def test_comparison_takes_the_latest_run_of_each_launch_on_one_model() -> None:
    store = BenchStore()
    store_run(store, fp("vllm-a"), decode_s=2.0)
    newest_a = store_run(store, fp("vllm-a"), decode_s=1.0)
    b = store_run(store, fp("llama-b", version="b2"), decode_s=0.5)
    store_run(store, fp("other", model="big"), decode_s=1.0)
    store_run(store, fp("empty"), decode_s=1.0, levels=(), status="stopped")  # no figures
    compared = store.comparison("tiny")
    assert [(r.fingerprint.label, r.id) for r in compared] == [("llama-b", b), ("vllm-a", newest_a)]
    assert store.models() == ["tiny", "big"]


def test_a_newer_schema_is_refused_and_left_untouched(tmp_path: Path) -> None:
    path = tmp_path / "bench.sqlite3"
    with sqlite3.connect(path) as conn:
        conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")
    with pytest.raises(BenchStoreError, match="newer sparkdeck"):
        BenchStore(path).runs()
    with sqlite3.connect(path) as conn:
        assert conn.execute("SELECT count(*) FROM sqlite_master").fetchone()[0] == 0


def test_readers_meeting_a_new_file_at_once_all_open_it(tmp_path: Path) -> None:
    """A benchmark starting while the history is read: each found no schema and created it,
    and all but the first failed with "table runs already exists" (a CI failure)."""
    failures: list[BaseException] = []
    for round_ in range(15):
        path = tmp_path / f"bench-{round_}.sqlite3"
        start = threading.Barrier(6)

        def read(path: Path = path, start: threading.Barrier = start) -> None:
            start.wait()
            try:
                assert BenchStore(path).runs() == []
            except BaseException as exc:  # noqa: BLE001 - collected for the assertion
                failures.append(exc)

        threads = [threading.Thread(target=read) for _ in range(6)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        with sqlite3.connect(path) as conn:
            assert conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
    assert failures == []


def test_a_broken_file_is_named_in_the_error(tmp_path: Path) -> None:
    path = tmp_path / "bench.sqlite3"
    path.write_text("not a database at all" * 100)
    with pytest.raises(BenchStoreError, match=str(path)):
        BenchStore(path).runs()


def test_csv_and_json_exports_carry_every_level_and_the_fingerprint() -> None:
    store = BenchStore()
    store_run(store, fp("llamacpp"), decode_s=1.0)
    store_run(store, fp("stopped"), decode_s=1.0, levels=(), status="stopped")
    runs = store.runs()
    rows = list(csv.DictReader(io.StringIO(to_csv(runs))))
    assert [(r["label"], r["concurrency"], r["status"]) for r in rows] == [
        ("stopped", "", "stopped"),
        ("llamacpp", "1", "complete"),
        ("llamacpp", "2", "complete"),
    ]
    assert float(rows[1]["decode_median_tps"]) == pytest.approx(10.0)
    assert rows[1]["image_id"] == "sha256:abc" and rows[0]["reason"] == "memory low"
    data = json.loads(to_json(runs))
    assert data["runs"][1]["fingerprint"]["argv"] == ["llama-server", "-c"]
    assert data["runs"][1]["points"][1]["total_decode_tps"] == pytest.approx(20.0)


def engine(url: str, alive: bool = True) -> EngineState:
    return EngineState(
        "cid",
        "sparkdeck-p",
        "p",
        "llamacpp",
        "img:1",
        "tiny",
        url,
        "/health",
        "/metrics",
        "h",
        "running" if alive else "exited",
        None,
        "2026",
        (),
        image_id="sha256:abc",
        argv=("llama-server", "-m", "x"),
    )


def test_fingerprint_uses_the_managed_container_only_when_it_serves_the_url() -> None:
    ep = Endpoint("x", "http://127.0.0.1:8080", "llamacpp", "/health", None, "flag")
    mine = fingerprint(ep, "tiny", "b1", engine("http://127.0.0.1:8080"))
    assert (mine.source, mine.preset_id, mine.image_id, mine.argv) == (
        "managed",
        "p",
        "sha256:abc",
        ("llama-server", "-m", "x"),
    )
    other = fingerprint(ep, "tiny", "b1", engine("http://127.0.0.1:9999"))
    assert (other.source, other.preset_id, other.image_id) == ("flag", None, None)
    assert fingerprint(ep, "tiny", "b1", engine(ep.url, alive=False)).source == "flag"
    # what shapes the figures changes the key; the container id does not
    assert mine.key != fingerprint(ep, "tiny", "b2", engine(ep.url)).key
    assert LaunchFingerprint.from_dict(mine.to_dict()) == mine
