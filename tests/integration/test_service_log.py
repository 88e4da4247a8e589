"""The service's log (sparkdeck.service.service_log): dated, graded lines in a rotating file.

A real detached service writes `2026-12-03T15:11:38+0000 INFO    sparkdeck.service: ...` lines
to the data dir's service.log, mode 0600. The rotation is checked in a process of its own whose
stderr is the log, as a detached service's is: the file stays bounded, old files are kept up to
the limit, and raw output after a rollover lands in the new file, not the renamed one.
"""

from __future__ import annotations

import os
import re
import stat
import subprocess
import sys
from pathlib import Path

from tests.support.cli import run_cli
from tests.support.service_teardown import Pinned, stop_service

DATED = re.compile(
    r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d[+-]\d{4} (INFO|WARNING|ERROR) +"
    r"sparkdeck\.service: "
)


def test_a_detached_service_writes_dated_graded_lines(isolated_dirs) -> None:
    env = {**os.environ, "SPARKDECK_SERVICE": "auto"}
    started = run_cli("service", "start", env=env)
    assert started.returncode == 0, started.stderr
    pid = int(started.stdout.split("process ")[1].rstrip(")\n"))
    stopped = stop_service(env, Pinned(pid))
    assert stopped.returncode == 0, stopped.stderr
    log = isolated_dirs["data"] / "service.log"
    assert stat.S_IMODE(log.stat().st_mode) == 0o600
    lines = log.read_text().splitlines()
    assert [line for line in lines if not DATED.match(line)] == [], lines
    said = [DATED.sub("", line) for line in lines]
    assert said[0].startswith(f"sparkdeck service {pid} listening on "), said
    assert said[-1] == "sparkdeck service stopped (the engine, if any, keeps running)", said


ROTATING = """
import logging, os, sys
from pathlib import Path
from sparkdeck.service import service_log
log = service_log.setup(Path(sys.argv[1]), max_bytes=2000, backups=2)
for n in range(200):
    log.info("record %03d %s", n, "x" * 40)
os.write(2, b"raw output after the rollovers\\n")
log.warning("the last record")
"""


def test_the_log_rotates_and_raw_output_follows_it(tmp_path: Path) -> None:
    log = tmp_path / "data" / "service.log"
    log.parent.mkdir(mode=0o700)
    with open(log, "ab") as out:  # the detached service's stdout and stderr are its log
        done = subprocess.run(
            [sys.executable, "-c", ROTATING, str(log)], stdout=out, stderr=out, timeout=60
        )
    assert done.returncode == 0
    files = sorted(p.name for p in log.parent.iterdir())
    assert files == ["service.log", "service.log.1", "service.log.2"]  # 2 kept, older dropped
    for name in files:
        path = log.parent / name
        assert stat.S_IMODE(path.stat().st_mode) == 0o600, name
        assert path.stat().st_size <= 2000 + 200, name  # one record over the bound at most
    current = log.read_text()
    assert "raw output after the rollovers\n" in current
    assert current.rstrip().endswith("sparkdeck.service: the last record")
    kept = (log.parent / "service.log.1").read_text() + (log.parent / "service.log.2").read_text()
    assert "raw output" not in kept and "record 199" in current + kept
    assert "record 000" not in current + kept  # the oldest were dropped, not kept forever
