"""Tests that kill mutations every quick-tier test let live (issue 28, item 5): the pure ones.

Each test names the one-line mutation it kills; tools/mutants.py applies each mutation in a
worktree of its own and runs the test named beside it, so the claim can be checked again by
anyone. The figures expected here are worked out by hand, never with the code's own helpers.
The Docker-backed half (ownership, the launch lock, the endpoint on the real service) is
tests/integration/test_mutants_28_docker.py.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
from safetensors.numpy import save_file

from sparkdeck.bench.stats import request_figures
from sparkdeck.chat.client import Timed
from sparkdeck.chat.deltas import Content, Usage
from sparkdeck.chat.reply import ReplyBuilder
from sparkdeck.config.settings import GuardSettings
from sparkdeck.engines import sglang as sglang_engine
from sparkdeck.engines import trtllm as trtllm_engine
from sparkdeck.engines import vllm as vllm_engine
from sparkdeck.guard.claims import GIB
from sparkdeck.guard.policy import OK, STOP, WatchdogPolicy
from sparkdeck.guard.readings import Reading
from sparkdeck.guard.stopper import StopAttempt
from sparkdeck.guard.watchdog import Watchdog
from sparkdeck.host.meminfo import MemorySnapshot
from sparkdeck.host.psi import PsiLine, PsiSnapshot
from sparkdeck.presets import PresetError, load_file
from tests.conftest import write_preset
from tests.support.hf_cache import add_to_cache

CONFIGS = Path(__file__).parents[1] / "fixtures" / "model_configs"
REPO = "meta-llama/Llama-3.1-8B-Instruct"


# ----- guard/watchdog.py: a failed stop is carried through a recovered reading --------------
def _reading(t: float, available_pct: int) -> Reading:
    total = 100 * GIB
    memory = MemorySnapshot(total, total * available_pct // 100, 0, 0, 0, 0, 0)
    return Reading(t, memory, PsiSnapshot(PsiLine(0.0, 0.0, 0.0, 0), PsiLine(0.0, 0.0, 0.0, 0), t))


def test_a_failed_stop_is_retried_after_memory_came_back_until_it_is_confirmed():
    """Kills: `_attempt_stop() if self.stop_pending` -> `if decision.level == STOP` (the
    retry tied to the newest reading: the failed stop is forgotten once memory is back)."""
    readings = iter([_reading(0.0, 1), _reading(1.0, 60), _reading(2.0, 60)])
    calls: list[float] = []

    def stop() -> StopAttempt | None:  # Docker did not answer the first time
        calls.append(1.0)
        if len(calls) == 1:
            raise TimeoutError("Docker is not answering")
        return StopAttempt(True, "stopped", 0, 1.0)

    dog = Watchdog(WatchdogPolicy(GuardSettings()), lambda: next(readings), stop, engine="e")
    assert dog.step().level == STOP and dog.stop_pending and len(calls) == 1
    assert dog.attempts[0].text == "stop failed: Docker is not answering; retrying"
    recovered = dog.step()  # 60 % available: the reading itself says all is well
    assert recovered.level == OK
    assert len(calls) == 2 and dog.stopped_by is not None and not dog.stop_pending
    assert dog.stopped_by.level == STOP and dog.stopped_by.reasons == ("MemAvailable 1.0 % < 5 %",)
    dog.step()
    assert len(calls) == 2  # confirmed: never stopped twice


# ----- engines/*: each engine's memory share capped at 0.9 at its call site -----------------
# A FAKE pool, put in at the one seam that reads /proc/meminfo: a Spark (128 GiB) with all of
# it available, so that only the 0.9 ceiling stands between a huge KV budget and the engine.
POOL = (128 * GIB, 128 * GIB)


@pytest.fixture
def hub(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A hub cache holding Llama 3.1 8B's config with 16 MiB of f16 weights."""
    cache, weights = tmp_path / "hub", tmp_path / "w.safetensors"
    save_file({"model.embed_tokens.weight": np.zeros((2048, 4096), dtype=np.float16)}, str(weights))
    add_to_cache(
        cache,
        REPO,
        {
            "config.json": (CONFIGS / "llama-3.1-8b.json").read_bytes(),
            "model.safetensors": weights.read_bytes(),
        },
    )
    monkeypatch.setenv("HF_HUB_CACHE", str(cache))
    for module in (vllm_engine, sglang_engine, trtllm_engine):
        monkeypatch.setattr(module, "host_pool", lambda: POOL)


def _sized(tmp_path: Path, kind: str, **fields: Any) -> list[str]:
    base = {
        "title": "t",
        "kind": kind,
        "image": "img:1",
        "model": REPO,
        "context": 8192,
        "kv_budget_gib": 120.0,
    }
    preset = load_file(write_preset(tmp_path / "presets", f"p-{kind}", **{**base, **fields}))
    return preset.container_spec().command


def test_sglang_static_fraction_never_exceeds_0_9(tmp_path: Path, hub: None):
    """Kills: `share_of(..., ceiling=SHARE_CEILING, ...)` -> `ceiling=1.0` in sglang.py.
    Weights + KV: 120 GiB + 16 MiB of 128 GiB (0.938); what is left after SGLang's 6 GiB
    of activations and the 2 GiB start-up reserve: 120 GiB (0.937); the ceiling: 0.9."""
    argv = _sized(tmp_path, "sglang")
    assert argv[argv.index("--mem-fraction-static") + 1] == "0.9"


def test_vllm_utilization_never_exceeds_0_9(tmp_path: Path, hub: None):
    """Kills: `ceiling=SHARE_CEILING` -> `ceiling=1.0` in vllm.py (124 GiB + 16 MiB of
    128 GiB is 0.969; 126 GiB left after the reserve is 0.984; the ceiling: 0.9)."""
    argv = _sized(tmp_path, "vllm")
    assert argv[argv.index("--gpu-memory-utilization") + 1] == "0.9"


def test_trtllm_free_fraction_never_exceeds_0_9(tmp_path: Path, hub: None):
    """Kills: `ceiling=SHARE_CEILING` -> `ceiling=1.0` in trtllm.py (120 GiB of the
    123.98 GiB free after weights and overhead is 0.968; the ceiling: 0.9)."""
    spec = load_file(
        write_preset(
            tmp_path / "presets",
            "p-trt",
            title="t",
            kind="trtllm",
            image="img:1",
            model=REPO,
            context=8192,
            kv_budget_gib=120.0,
        )
    ).container_spec()
    assert "free_gpu_memory_fraction: 0.9\n" in spec.files[0].content


# ----- presets.py: every spelling of a secret's name is refused -----------------------------
@pytest.mark.parametrize(
    "name",
    [
        "OPENAI_APIKEY",  # only APIKEY matches (no `_` before KEY, no API_KEY, no TOKEN)
        "MY_API_KEY_FILE",  # only API_KEY matches (KEY is not at the end)
        "HF_TOKEN_PATH",  # only TOKEN
        "CLIENT_SECRET_ID",  # only SECRET
        "DB_PASSWORD_FILE",  # only PASSWORD
        "SIGNING_KEY",  # only _KEY$
    ],
)
def test_each_secret_name_pattern_is_refused(tmp_path: Path, name: str):
    """Kills: the pattern without `APIKEY` (and without any other of its alternatives)."""
    path = write_preset(
        tmp_path, "p", title="t", kind="vllm", image="i", model="m", env={name: "not-for-a-file"}
    )
    with pytest.raises(PresetError) as info:
        load_file(path)
    assert f"env.{name}: looks like a secret" in str(info.value)


@pytest.mark.parametrize("name", ["KEYBOARD_LAYOUT", "MONKEY", "MY_KEYS", "VLLM_LOGGING_LEVEL"])
def test_names_that_only_look_alike_are_accepted(tmp_path: Path, name: str):
    """Kills: `_KEY$` unanchored (MY_KEYS refused) or `KEY` alone (MONKEY refused)."""
    path = write_preset(
        tmp_path, "p", title="t", kind="vllm", image="i", model="m", env={name: "1"}
    )
    assert load_file(path).env == {name: "1"}


# ----- bench/stats.py and chat/reply.py: a first read that carried several tokens ----------
# 11 text events: the first three read off the socket together at t = 1.0 (the reader was
# late), then eight one by one until t = 2.0. The stamp 1.0 is right for the third token, so
# the rate is the 8 tokens after it over 1.0 s: 8.0 tok/s (uncorrected: 10 over 1.0 s).
def _late_first_read() -> list[Timed]:
    first = [Timed(1.0, Content("t"), event=i) for i in (1, 2, 3)]
    rest = [Timed(1.0 + k / 8, Content("t"), event=3 + k) for k in range(1, 9)]
    return [*first, *rest]


def test_bench_decode_rate_counts_from_the_last_token_of_the_first_read():
    """Kills: `after *= (self.text_chunks - self.first_batch) / (self.text_chunks - 1)`
    -> `after *= 1.0` in bench/stats.py."""
    figures = request_figures(
        0.5, _late_first_read(), 2.1, prompt_fallback=4, prompt_fallback_source="target"
    )
    assert (figures.text_chunks, figures.first_batch, figures.output_tokens) == (11, 3, 11)
    assert figures.decode_tps == pytest.approx(8.0)


def test_chat_decode_rate_counts_from_the_last_token_of_the_first_read():
    """Kills: the same correction dropped in chat/reply.py (`after = completion - 1`).
    The server's count (22 tokens over 11 pieces: two a piece) goes in proportion:
    21 x 8/10 = 16.8 tokens after the first read, over 1.0 s."""
    builder = ReplyBuilder(0.5)
    for timed in _late_first_read():
        builder.add(timed)
    builder.add(Timed(2.0, Usage(4, 22, 26), event=12))
    figures = builder.figures()
    assert figures.completion_tokens == 22 and figures.tokens_from == "usage"
    assert figures.decode_tps == pytest.approx(16.8)
