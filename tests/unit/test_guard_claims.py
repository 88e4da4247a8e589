"""Memory claims for each engine kind and the fit check's verdicts, with the numbers.

MemTotal and the MemorySnapshots below are FAKES shaped like a Spark (121.7 GiB visible;
SPARK.md): this machine has 24 GiB. The GGUF is real (written with the `gguf` package) and
read back by the claim; the non-root flush path runs as a real unprivileged process.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from sparkdeck.config.settings import GuardSettings
from sparkdeck.guard.claims import GIB, read_gguf_shape
from sparkdeck.guard.fit import DOES_NOT_FIT, FITS, FITS_AFTER_FLUSH, UNKNOWN, check_fit
from sparkdeck.host.meminfo import MemorySnapshot
from sparkdeck.presets import load_file
from tests.conftest import base_fields, unavailable, write_preset
from tests.support.tiny_gguf import write_tiny_gguf

SPARK_TOTAL = int(121.7 * GIB)  # fake: a Spark's MemTotal
GUARD = GuardSettings()


def spark_memory(available_gib: float, free_gib: float) -> MemorySnapshot:
    """A fake Spark-sized reading: what is not free but available is page cache."""
    available, free = int(available_gib * GIB), int(free_gib * GIB)
    return MemorySnapshot(SPARK_TOTAL, available, free, available - free, 0, 0, 0)


def preset(tmp_path: Path, kind: str, table: dict | None = None, **extra):
    fields = {"title": kind, "kind": kind, "image": "x/y:1", "model": "m", **base_fields(), **extra}
    if table:
        fields[kind] = table
    return load_file(write_preset(tmp_path / "p", f"p-{kind}", **fields))


def test_vllm_claims_its_share_of_memtotal(tmp_path):
    claim = preset(tmp_path, "vllm", {"gpu_memory_utilization": 0.8}).memory_claim(
        SPARK_TOTAL, GUARD
    )
    assert claim.bytes == int(0.8 * SPARK_TOTAL) and not claim.estimated
    assert claim.describe().startswith("97.4 GiB (gpu_memory_utilization 0.8 x MemTotal 121.7")


def test_sglang_adds_the_activation_reserve_from_settings(tmp_path):
    p = preset(tmp_path, "sglang", {"mem_fraction_static": 0.75})
    assert p.memory_claim(SPARK_TOTAL, GUARD).bytes == int(0.75 * SPARK_TOTAL) + 6 * GIB
    claim = p.memory_claim(SPARK_TOTAL, GuardSettings(sglang_reserve_gib=8.0))
    assert claim.bytes == int(0.75 * SPARK_TOTAL) + 8 * GIB
    assert "8 GiB activation reserve" in claim.basis and claim.estimated


def test_trtllm_with_and_without_stated_weights(tmp_path):
    floor = preset(tmp_path, "trtllm", {"free_gpu_memory_fraction": 0.5}).memory_claim(
        SPARK_TOTAL, GUARD
    )
    assert floor.bytes == int(0.5 * SPARK_TOTAL) and "a floor" in floor.note
    full = preset(
        tmp_path, "trtllm", {"free_gpu_memory_fraction": 0.5, "weights_gib": 20.0}
    ).memory_claim(SPARK_TOTAL, GUARD)
    assert full.bytes == 20 * GIB + int(0.5 * (SPARK_TOTAL - 20 * GIB))


def test_ollama_and_custom_use_the_stated_size_or_say_they_cannot(tmp_path):
    unknown = preset(tmp_path, "ollama").memory_claim(SPARK_TOTAL, GUARD)
    assert unknown.bytes is None and "ollama.memory_gib" in unknown.describe()
    stated = preset(tmp_path, "ollama", {"memory_gib": 14.5}).memory_claim(SPARK_TOTAL, GUARD)
    assert stated.bytes == int(14.5 * GIB)
    custom = preset(tmp_path, "openai", {"container_port": 9000, "memory_gib": 30.0})
    assert custom.memory_claim(SPARK_TOTAL, GUARD).bytes == 30 * GIB


def test_llamacpp_reads_the_local_gguf_and_adds_the_kv_cache(tmp_path):
    models = tmp_path / "models"
    models.mkdir()
    gguf_file = write_tiny_gguf(models / "tiny.gguf", n_layers=2, n_head=2, n_head_kv=1)
    shape = read_gguf_shape(gguf_file)
    assert (shape.layers, shape.kv_heads, shape.key_length) == (2, 1, 32)
    p = preset(
        tmp_path,
        "llamacpp",
        {"context": 4096},
        model="/models/tiny.gguf",
        volumes=[f"{models}:/models:ro"],
    )
    claim = p.memory_claim(SPARK_TOTAL, GUARD)
    # 4096 tokens x 2 layers x 1 KV head x (32 + 32) x 2 bytes (f16)
    assert claim.bytes == gguf_file.stat().st_size + 4096 * 2 * 1 * 64 * 2
    assert "for -c 4096" in claim.basis and "compute buffers not counted" in claim.note
    # a model fetched by llama-server (-hf) cannot be read here: the stated size is used
    remote = preset(tmp_path, "llamacpp", {"memory_gib": 13.0}, model="org/model-GGUF")
    assert remote.memory_claim(SPARK_TOTAL, GUARD).bytes == 13 * GIB


def test_llamacpp_file_that_is_not_a_gguf_falls_back_to_its_size(tmp_path):
    bogus = tmp_path / "models" / "bad.gguf"
    bogus.parent.mkdir()
    bogus.write_bytes(b"not a gguf" * 1000)
    p = preset(tmp_path, "llamacpp", model="/models/bad.gguf", volumes=[f"{bogus.parent}:/models"])
    claim = p.memory_claim(SPARK_TOTAL, GUARD)
    assert claim.bytes == 10_000 and "KV cache unknown" in claim.note


HEADROOM = int(0.05 * SPARK_TOTAL)  # the stop threshold, kept free on top of a claim


@pytest.mark.parametrize(
    "available, free, verdict",
    [
        (118.0, 110.0, FITS),  # 97.4 + 6.1 = 103.5 GiB needed, 110 free
        (118.0, 60.0, FITS_AFTER_FLUSH),  # fits MemAvailable only: the page cache must go
        (100.0, 95.0, DOES_NOT_FIT),  # short even of MemAvailable
    ],
)
def test_fit_verdicts_for_a_vllm_claim(tmp_path, available, free, verdict):
    claim = preset(tmp_path, "vllm").memory_claim(SPARK_TOTAL, GUARD)
    fit = check_fit(claim, spark_memory(available, free), headroom=HEADROOM)
    assert fit.verdict == verdict
    text = "\n".join(fit.lines())
    assert f"MemAvailable:   {available:.1f} GiB" in text and f"MemFree:        {free:.1f}" in text
    assert fit.allowed == (verdict != DOES_NOT_FIT)


def test_memory_coming_back_from_the_stopped_engine_counts():
    from sparkdeck.guard.claims import MemoryClaim

    claim = MemoryClaim(80 * GIB, "test")
    busy = spark_memory(30.0, 25.0)  # another engine holds ~88 GiB now
    assert check_fit(claim, busy, headroom=HEADROOM).verdict == DOES_NOT_FIT
    fit = check_fit(claim, busy, headroom=HEADROOM, returning=85 * GIB)
    assert fit.verdict == FITS and "85.0 GiB from the engine stopped first" in fit.lines()[5]


def test_without_a_flush_a_cache_bound_fit_does_not_fit_and_says_why(tmp_path):
    claim = preset(tmp_path, "vllm").memory_claim(SPARK_TOTAL, GUARD)
    fit = check_fit(claim, spark_memory(118.0, 60.0), headroom=HEADROOM, flush_possible=False)
    assert fit.verdict == DOES_NOT_FIT
    assert "would fit after flushing the page cache" in fit.reason


def test_unknown_claim_is_allowed_but_says_it_cannot_be_checked(tmp_path):
    claim = preset(tmp_path, "ollama").memory_claim(SPARK_TOTAL, GUARD)
    fit = check_fit(claim, spark_memory(118.0, 110.0), headroom=HEADROOM)
    assert fit.verdict == UNKNOWN and fit.allowed and "ollama.memory_gib" in fit.reason


def test_flush_reporting_as_root_and_as_a_real_non_root_user(tmp_path):
    """Root can flush, so a cache-bound fit says "fits after flushing"; a real process that
    gave up root cannot, and the same numbers say "does not fit" (it never flushes)."""
    if os.geteuid() != 0:
        unavailable("needs root to become another user")
    code = (
        "import os, sys\n"
        "from sparkdeck.host.pagecache import can_flush\n"
        "from sparkdeck.guard.fit import check_fit\n"
        "from sparkdeck.guard.claims import MemoryClaim\n"
        "from sparkdeck.host.meminfo import MemorySnapshot\n"
        "if sys.argv[1] == 'drop': os.setgroups([]); os.setgid(65534); os.setuid(65534)\n"
        "m = MemorySnapshot(100 << 30, 90 << 30, 40 << 30, 50 << 30, 0, 0, 0)\n"
        "print(check_fit(MemoryClaim(60 << 30, 't'), m, headroom=0, "
        "flush_possible=can_flush()).verdict)\n"
    )
    root_dir = Path(__file__).resolve().parents[2]
    as_root, as_nobody = (
        subprocess.run(
            [sys.executable, "-c", code, who],
            capture_output=True,
            text=True,
            cwd=root_dir,
            timeout=60,
        )
        for who in ("keep", "drop")
    )
    assert as_root.stdout.strip() == FITS_AFTER_FLUSH, as_root.stderr
    assert as_nobody.stdout.strip() == DOES_NOT_FIT, as_nobody.stderr
