"""Tests that kill mutations every other test let live (issue 12, item 15).

Each test names the mutation it kills. All were checked by hand: apply the mutation, see this
test fail, revert. The inputs are small and exact, so each boundary is hit on the dot.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from sparkdeck.bench.stats import request_figures
from sparkdeck.chat.client import Timed
from sparkdeck.chat.deltas import Content, Finished, Reasoning
from sparkdeck.config.settings import GuardSettings
from sparkdeck.guard.claims import GIB, MemoryClaim
from sparkdeck.guard.fit import DOES_NOT_FIT, FITS, FITS_AFTER_FLUSH, check_fit
from sparkdeck.guard.policy import OK, STOP, WARN, WatchdogPolicy
from sparkdeck.guard.readings import Reading
from sparkdeck.host.meminfo import MemorySnapshot
from sparkdeck.host.psi import PsiLine, PsiSnapshot, stall_rates
from sparkdeck.metrics.exposition import parse_body
from sparkdeck.metrics.history import MetricsHistory
from sparkdeck.metrics.reader import RawSample
from sparkdeck.presets import PresetError, load_file
from sparkdeck.ui.themes import load_theme


# ----- bench/stats.py: the empty-content filter ---------------------------------------------
def test_empty_and_role_only_chunks_are_not_tokens_nor_the_first_token():
    """Kills: `if isinstance(delta, (Content, Reasoning)) and delta.text` -> without `.text`."""
    events = [
        Timed(0.10, Content("")),  # role-only first chunk: vLLM sends one
        Timed(0.50, Reasoning("hm")),
        Timed(0.70, Content("")),
        Timed(0.90, Content("a")),
        Timed(1.30, Content("")),  # an empty chunk after the text: not the last token
        Timed(1.40, Finished("stop")),
    ]
    figures = request_figures(0.0, events, 1.5, prompt_fallback=8, prompt_fallback_source="target")
    assert (figures.first_at, figures.last_at) == (0.50, 0.90)
    assert (figures.output_tokens, figures.output_source) == (2, "chunks")


# ----- metrics/history.py: histogram resets, monotonic time ----------------------------------
def _histogram(counts: tuple[float, float, float], t: float, wall: float) -> RawSample:
    le = ("0.1", "1.0", "+Inf")
    lines = ["# TYPE ttft histogram"]
    lines += [f'ttft_bucket{{le="{b}"}} {c}' for b, c in zip(le, counts, strict=False)]
    lines += [
        f"ttft_sum {counts[-1] * 0.5}",
        f"ttft_count {counts[-1]}",
        "# TYPE gen_total counter",
        f"gen_total {t * 100}",
    ]
    return RawSample(parse_body(("\n".join(lines) + "\n").encode()), wall=wall, monotonic=t)


def test_a_histogram_reset_counts_the_new_observations():
    """Kills: ignoring the reset (`reset = False`): the new buckets would add nothing."""
    history = MetricsHistory()
    history.add(_histogram((50, 80, 100), 0.0, 1e9))
    history.add(_histogram((2, 3, 4), 1.0, 1e9 + 1))  # the engine restarted meanwhile
    assert history.histogram_increments(("ttft",), None) == {0.1: 2, 1.0: 3, float("inf"): 4}


def test_rates_use_the_monotonic_clock_not_the_wall_clock():
    """Kills: elapsed from `wall` instead of `monotonic` (an NTP step moves the wall clock)."""
    history = MetricsHistory()
    history.add(_histogram((0, 0, 0), 0.0, 1_800_000_000.0))
    history.add(_histogram((0, 0, 0), 2.0, 1_800_000_000.0 + 3600.0))  # the wall jumped 1 h
    assert history.rate(("gen_total",), None) == pytest.approx(100.0)


# ----- host/psi.py: a counter reset never gives a negative rate ------------------------------
def _psi(t: float, some_us: int, full_us: int) -> PsiSnapshot:
    return PsiSnapshot(PsiLine(0.0, 0.0, 0.0, some_us), PsiLine(0.0, 0.0, 0.0, full_us), t)


@pytest.mark.parametrize("some_after, full_after", [(100, 5_000_000), (9_000_000, 100)])
def test_psi_totals_that_went_down_give_no_rate(some_after, full_after):
    """Kills: dropping `some < 0 or full < 0` (a reset read as a negative stall rate)."""
    before, after = _psi(10.0, 8_000_000, 4_000_000), _psi(11.0, some_after, full_after)
    assert stall_rates(before, after) is None


# ----- guard/policy.py: `<`/`>` at each threshold, on the dot --------------------------------
TOTAL = 100 * GIB


def _reading(t: float, available_pct: float, some10: float = 0.0, full_us: int = 0) -> Reading:
    memory = MemorySnapshot(TOTAL, int(TOTAL * available_pct) // 100, 0, 0, 0, 0, 0)
    psi = PsiSnapshot(PsiLine(some10, 0.0, 0.0, 0), PsiLine(0.0, 0.0, 0.0, full_us), t)
    return Reading(t, memory, psi)


@pytest.mark.parametrize(
    "available_pct, some10, level",
    [
        (10.0, 0.0, OK),  # at warn_available_pct: not under it
        (50.0, 10.0, OK),  # at warn_some_avg10: not over it
        (5.0, 0.0, WARN),  # at stop_available_pct: not under it, but under the warning
    ],
)
def test_thresholds_on_the_dot(available_pct, some10, level):
    """Kills: `<` -> `<=` on MemAvailable, `>` -> `>=` on PSI some avg10."""
    reading = _reading(0.0, available_pct, some10)
    assert 100.0 * reading.memory.available / reading.memory.total == available_pct
    assert WatchdogPolicy(GuardSettings()).decide([reading]).level == level


def test_full_stall_rate_exactly_at_the_threshold_does_not_stop():
    """Kills: `r > stop_full_rate_pct` -> `>=` (5 % for 3 intervals is allowed, 5.1 % not)."""
    guard = GuardSettings()
    # intervals of 0.5 s (exact in binary) so rate = us / 5000 exactly
    at = [_reading(i * 0.5, 50.0, full_us=i * 25_000) for i in range(4)]
    policy = WatchdogPolicy(guard)
    assert policy.full_rates(at) == [guard.stop_full_rate_pct] * 3
    assert policy.decide(at).level == OK
    over = [_reading(i * 0.5, 50.0, full_us=i * 25_500) for i in range(4)]
    assert policy.decide(over).level == STOP


# ----- guard/fit.py: the fit boundary -----------------------------------------------------
def test_a_claim_that_needs_exactly_what_is_there_fits():
    """Kills: `need > available` -> `>=` and `need <= free` -> `<`."""
    claim, headroom = MemoryClaim(60 * GIB, "test"), 5 * GIB

    def memory(available: int, free: int) -> MemorySnapshot:
        return MemorySnapshot(TOTAL, available, free, available - free, 0, 0, 0)

    assert check_fit(claim, memory(65 * GIB, 65 * GIB), headroom=headroom).verdict == FITS
    assert (
        check_fit(claim, memory(65 * GIB, 40 * GIB), headroom=headroom).verdict == FITS_AFTER_FLUSH
    )
    assert (
        check_fit(claim, memory(65 * GIB - 1, 40 * GIB), headroom=headroom).verdict == DOES_NOT_FIT
    )
    assert (
        check_fit(claim, memory(65 * GIB, 65 * GIB - 1), headroom=headroom).verdict
        == FITS_AFTER_FLUSH
    )


# ----- presets.py: secret names in any case --------------------------------------------------
@pytest.mark.parametrize(
    "name", ["hf_token", "Hf_Token", "openai_api_key", "foo_password", "My_Secret"]
)
def test_secret_names_are_refused_in_any_case(tmp_path: Path, name: str):
    """Kills: a case-sensitive secret-name check (dropping re.I)."""
    path = tmp_path / "p.toml"
    path.write_text(
        f'id = "p"\ntitle = "t"\nkind = "vllm"\nimage = "i"\nmodel = "m"\n'
        f'[env]\n{name} = "not-for-a-file"\n'
    )
    with pytest.raises(PresetError) as info:
        load_file(path)
    assert f"env.{name}" in str(info.value) and "looks like a secret" in str(info.value)


# ----- ui/themes.py: the validator ---------------------------------------------------------
GOOD = {"name": "t", "primary": "#112233", "secondary": "#445566", "background": "#000000"}


def _theme(tmp_path: Path, **values: str) -> Path:
    path = tmp_path / "t.toml"
    path.write_text("".join(f'{k} = "{v}"\n' for k, v in values.items()))
    return path


def test_a_good_theme_loads(tmp_path: Path):
    assert load_theme(_theme(tmp_path, **GOOD)).primary == "#112233"


@pytest.mark.parametrize(
    "key, value",
    [
        ("primary", "#1122334"),  # kills an unanchored end: `^#[0-9A-Fa-f]{6}`
        ("primary", "x#112233"),  # kills an unanchored start: `#[0-9A-Fa-f]{6}$`
        ("secondary", "#12345g"),  # kills "only primary is checked"
        ("background", "red"),
    ],
)
def test_bad_colours_are_refused_with_the_key(tmp_path: Path, key: str, value: str):
    with pytest.raises(ValueError, match=re.escape(f"{key}") + ".*is not a #RRGGBB colour"):
        load_theme(_theme(tmp_path, **{**GOOD, key: value}))


def test_primary_is_required(tmp_path: Path):
    """Kills: `required=c == "primary"` -> never required."""
    values = {k: v for k, v in GOOD.items() if k != "primary"}
    with pytest.raises(ValueError, match="primary"):
        load_theme(_theme(tmp_path, **values))
