"""settings.toml (defaults, bad values named by file and key, atomic keep-the-rest writes) and
the PSI reader on this machine's real /proc/pressure/memory and on written texts."""

from __future__ import annotations

from pathlib import Path

import pytest

from sparkdeck.config.settings import (
    GuardSettings,
    SettingsError,
    load_settings,
    save_setting,
    settings_path,
)
from sparkdeck.host.psi import PsiError, parse_pressure, read_pressure, stall_rates

PSI_TEXT = (
    "some avg10=1.50 avg60=0.75 avg300=0.10 total=1000000\n"
    "full avg10=0.20 avg60=0.05 avg300=0.00 total=200000\n"
)
from tests.conftest import unavailable  # noqa: E402 (sys.path is set up first)


def test_missing_settings_file_means_defaults() -> None:
    settings = load_settings()
    assert settings.ui.theme == "spark-dark"
    assert settings.guard == GuardSettings()
    assert settings.guard.mode == "stop"


def test_bad_values_are_named_with_file_and_key() -> None:
    path = settings_path()
    path.parent.mkdir(parents=True)
    path.write_text('[guard]\nmode = "ignore"\nstop_available_pct = 150.0\n[colours]\n')
    with pytest.raises(SettingsError) as info:
        load_settings()
    text = str(info.value)
    assert f"{path}: guard.mode" in text and "stop, warn" in text
    assert "guard.stop_available_pct" in text
    assert f"{path}: colours: unknown section" in text


def test_stop_threshold_above_warn_is_refused() -> None:
    path = settings_path()
    path.parent.mkdir(parents=True)
    path.write_text("[guard]\nwarn_available_pct = 4.0\n")
    with pytest.raises(SettingsError, match="stop_available_pct"):
        load_settings()


def test_save_keeps_other_keys_and_refuses_bad_values() -> None:
    path = settings_path()
    path.parent.mkdir(parents=True)
    path.write_text("[guard]\nstop_consecutive = 5\n")
    save_setting("ui", "theme", "solarized-night")
    settings = load_settings()
    assert settings.ui.theme == "solarized-night"
    assert settings.guard.stop_consecutive == 5
    before = path.read_text()
    with pytest.raises(SettingsError):
        save_setting("guard", "mode", "never")
    assert path.read_text() == before
    assert not [p for p in path.parent.iterdir() if p.name.startswith(".settings")]


def test_save_never_overwrites_a_file_that_is_already_bad() -> None:
    path = settings_path()
    path.parent.mkdir(parents=True)
    path.write_text('ui = "not a table"\n[guard]\nmode = "stop"\n')
    with pytest.raises(SettingsError, match="ui: must be a table"):
        save_setting("ui", "theme", "spark-light")
    assert path.read_text() == 'ui = "not a table"\n[guard]\nmode = "stop"\n'


def test_parse_pressure_reads_both_lines() -> None:
    snap = parse_pressure(PSI_TEXT, monotonic=10.0)
    assert snap.some.avg10 == 1.5 and snap.some.total_us == 1_000_000
    assert snap.full.avg60 == 0.05 and snap.full.total_us == 200_000


@pytest.mark.parametrize(
    "text",
    [
        "",
        "some avg10=1 avg60=2 avg300=3 total=4\n",
        "some avg10=x avg60=0 avg300=0 total=1\nfull avg10=0 avg60=0 avg300=0 total=1\n",
        "some avg10=0 avg60=0 total=1\nfull avg10=0 avg60=0 avg300=0 total=1\n",
    ],
)
def test_malformed_pressure_is_a_typed_error(text: str) -> None:
    with pytest.raises(PsiError):
        parse_pressure(text, monotonic=0.0)


def test_rates_from_total_deltas() -> None:
    a = parse_pressure(PSI_TEXT, monotonic=10.0)
    # 0.5 s of `some` stall and 0.05 s of `full` stall over 1 s of wall time
    b = parse_pressure(
        PSI_TEXT.replace("total=1000000", "total=1500000").replace("total=200000", "total=250000"),
        monotonic=11.0,
    )
    rates = stall_rates(a, b)
    assert rates is not None
    assert rates.some_pct == pytest.approx(50.0)
    assert rates.full_pct == pytest.approx(5.0)
    assert stall_rates(b, a) is None  # backwards in time: no rate, never a negative one


def test_real_pressure_file_on_this_machine() -> None:
    if not Path("/proc/pressure/memory").exists():
        unavailable("this kernel has no PSI")
    first = read_pressure()
    second = read_pressure()
    assert second.monotonic > first.monotonic
    assert second.some.total_us >= first.some.total_us
    rates = stall_rates(first, second)
    assert rates is not None and 0.0 <= rates.some_pct <= 100.0


def test_missing_pressure_file_says_why(tmp_path: Path) -> None:
    with pytest.raises(PsiError, match="CONFIG_PSI"):
        read_pressure(tmp_path / "nope")
