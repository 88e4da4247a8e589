"""Host readers: /proc/meminfo, and the page-cache flush as root and as a non-root user."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import psutil
import pytest

from sparkdeck.host.meminfo import MemInfoError, parse_meminfo, read_meminfo
from sparkdeck.host.pagecache import HOW_TO_ALLOW, FlushNotPermitted, can_flush, flush_page_cache
from tests.conftest import unavailable

# FAKE, labelled: the shape of a DGX Spark's /proc/meminfo (MemTotal ~121.7 GiB as the OS
# sees 128 GB; SPARK.md). This machine has 24 GiB, so a Spark's figures are written by hand.
SPARK_MEMINFO = """MemTotal:       127599464 kB
MemFree:         3012345 kB
MemAvailable:   98765432 kB
Buffers:          123456 kB
Cached:         90123456 kB
SwapCached:            0 kB
SwapTotal:      16777212 kB
SwapFree:       16777212 kB
"""


def test_parse_spark_shaped_meminfo():
    snap = parse_meminfo(SPARK_MEMINFO)
    assert snap.total == 127599464 * 1024
    assert snap.available == 98765432 * 1024
    assert snap.page_cache == (90123456 + 123456) * 1024
    assert snap.used == (127599464 - 98765432) * 1024
    assert round(snap.total / 2**30, 1) == 121.7


def test_missing_field_is_a_typed_error():
    with pytest.raises(MemInfoError, match="MemAvailable"):
        parse_meminfo(SPARK_MEMINFO.replace("MemAvailable", "MemAvail"))
    with pytest.raises(MemInfoError, match="cannot read"):
        read_meminfo(Path("/nonexistent/meminfo"))


def test_real_meminfo_agrees_with_psutil():
    snap = read_meminfo()
    vm = psutil.virtual_memory()
    assert snap.total == vm.total
    assert abs(snap.available - vm.available) < 256 * 2**20  # read a moment apart


def test_flush_as_root_drops_a_file_from_the_cache(tmp_path):
    if os.geteuid() != 0 or not os.access("/proc/sys/vm/drop_caches", os.W_OK):
        unavailable("needs root and a writable /proc/sys/vm/drop_caches")
    # Put ~256 MiB into the page cache, then check the flush takes most of it out again.
    blob = tmp_path / "blob"
    with blob.open("wb") as fh:
        for _ in range(256):
            fh.write(os.urandom(1 << 20))
    blob.read_bytes()
    assert can_flush()
    report = flush_page_cache()
    assert report.method == "root"
    assert report.before.cached - report.after.cached > 128 * 2**20, report.describe()
    assert "page cache flushed (root" in report.describe()


def test_flush_as_non_root_says_how_to_allow_it():
    """A real process that gave up root (to user nobody) before flushing."""
    if os.geteuid() != 0:
        unavailable("needs root to become another user")
    # The interpreter lives under /root here, which nobody may not execute: start as root,
    # load sparkdeck, then drop to nobody before asking to flush.
    code = (
        "import os\n"
        "from sparkdeck.host.pagecache import flush_page_cache, can_flush, "
        "FlushNotPermitted\n"
        "os.setgroups([]); os.setgid(65534); os.setuid(65534)\n"
        "print('can', can_flush())\n"
        "try:\n    flush_page_cache()\nexcept FlushNotPermitted as e:\n    print(e)\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        cwd=Path(__file__).resolve().parents[2],
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("can False")
    assert HOW_TO_ALLOW.splitlines()[0] in result.stdout
    assert "NOPASSWD: /usr/bin/tee /proc/sys/vm/drop_caches" in result.stdout


def test_flush_when_sudo_refuses(tmp_path):
    # `false` stands in for a sudo that refuses: the real subprocess path, exit code 1.
    with pytest.raises(FlushNotPermitted) as info:
        flush_page_cache(drop_caches=tmp_path / "drop_caches", euid=1000, sudo=("false",))
    assert "--no-flush" in str(info.value)
    assert not can_flush(drop_caches=tmp_path / "drop_caches", euid=1000, sudo=("false",))
