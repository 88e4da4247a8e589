"""Watchdog decisions on replayed readings (the recordings are SYNTHETIC: see
tests/fixtures/guard/make_recordings.py), and the loop body acting on them."""

from __future__ import annotations

from dataclasses import replace

import pytest

from sparkdeck.config.settings import GuardSettings
from sparkdeck.guard.policy import OK, STOP, WARN, WatchdogPolicy
from sparkdeck.guard.readings import Reading
from sparkdeck.guard.records import recent_actions
from sparkdeck.guard.watchdog import Watchdog
from tests.support.guard_readings import recording


class Replay:
    """A reading source that hands out a recording one reading per call."""

    def __init__(self, readings: list[Reading]):
        self.readings = iter(readings)

    def __call__(self) -> Reading:
        return next(self.readings)


def replay(
    readings: list[Reading], guard: GuardSettings = GuardSettings()
) -> tuple[Watchdog, list, list[float]]:
    stops: list[float] = []
    decisions: list = []
    source = Replay(readings)
    dog = Watchdog(
        WatchdogPolicy(guard),
        source,
        lambda: stops.append(dog.window[-1].t),
        engine="replayed",
        on_decision=decisions.append,
    )
    for _ in readings:
        dog.step()
        if dog.stopped_by is not None:
            break
    return dog, decisions, stops


def test_ramp_to_wedge_is_stopped_before_the_wedge_by_the_stall_rate():
    data, readings = recording("ramp_to_wedge")
    dog, _decisions, stops = replay(readings)
    assert len(stops) == 1, "the stop action runs exactly once"
    stopped_t = stops[0]
    assert stopped_t < data["wedge_at_t"] - 3, "stopped seconds before the host wedges"
    assert dog.stopped_by is not None and dog.stopped_by.level == STOP
    assert "full stall rate" in dog.stopped_by.reasons[0]
    # the rate from total deltas fired while the kernel's own avg10 still read under 5 %:
    assert dog.stopped_by.reading.psi.full.avg10 < 5.0
    # and before MemAvailable itself fell below the 5 % stop line
    assert dog.stopped_by.reading.available_pct > 5.0
    # MemAvailable alone would have acted seconds later, closer to the wedge
    later = next(r.t for r in readings if r.available_pct < 5.0)
    assert later - stopped_t >= 3
    # the stop was written to the data dir with the last 60 s of readings
    stopped = [a for a in recent_actions() if a["action"] == "stopped"]
    assert len(stopped) == 1
    window = stopped[0]["window"]
    assert window[-1]["t"] == stopped_t and stopped_t - window[0]["t"] <= 60.0
    assert len(window) == min(121, int(stopped_t / 0.5) + 1)  # 2 Hz, at most 60 s


def test_noisy_plateau_warns_but_never_stops():
    _, readings = recording("noisy_plateau")
    dog, decisions, stops = replay(readings)
    assert stops == [] and dog.stopped_by is None
    assert len(decisions) == len(readings)
    levels = {d.level for d in decisions}
    assert levels == {OK, WARN}
    # isolated stall spikes over 5 % are in the recording, never three in a row
    rates = WatchdogPolicy(GuardSettings()).full_rates(readings)
    assert sum(1 for r in rates if r and r > 5) >= 6
    # warnings are recorded once per 60 s window, not once per flicker
    warned = [a for a in recent_actions(100) if a["action"] == "warned"]
    assert 1 <= len(warned) <= 3


def test_the_same_spikes_stop_when_two_in_a_row_are_enough():
    _, readings = recording("noisy_plateau")
    dog, _, stops = replay(readings, GuardSettings(stop_consecutive=2))
    # spike intervals ending at 10 and 11
    assert len(stops) == 1 and dog.stopped_by.reading.t == 11.0


def test_warn_only_mode_never_calls_stop_but_says_it_would():
    _, readings = recording("ramp_to_wedge")
    dog, decisions, stops = replay(readings, GuardSettings(mode="warn"))
    assert stops == [] and dog.stopped_by is None
    assert any("warn-only mode" in " ".join(d.reasons) for d in decisions)
    assert all(d.level != STOP for d in decisions)
    assert [a["action"] for a in recent_actions(100)].count("would stop") == 1


def _flat(pct: float, n: int, full_rate: float = 0.0, some10: float = 0.0) -> list[Reading]:
    _, base = recording("noisy_plateau")
    out = []
    for i in range(n):
        r = base[0]
        mem = replace(r.memory, available=int(r.memory.total * pct / 100))
        full = replace(r.psi.full, total_us=int(i * full_rate / 100 * 1e6))
        some = replace(r.psi.some, avg10=some10)
        out.append(Reading(float(i), mem, replace(r.psi, some=some, full=full, monotonic=i)))
    return out


@pytest.mark.parametrize(
    "pct, some10, level",
    [
        (50.0, 0.0, OK),
        (9.9, 0.0, WARN),
        (50.0, 10.5, WARN),
        (4.9, 0.0, STOP),
        (5.0, 0.0, WARN),
    ],
)
def test_thresholds(pct, some10, level):
    decision = WatchdogPolicy(GuardSettings()).decide(_flat(pct, 1, some10=some10))
    assert decision.level == level


def test_full_rate_needs_three_consecutive_intervals_over_five_percent():
    policy = WatchdogPolicy(GuardSettings())
    assert policy.decide(_flat(50.0, 3, full_rate=20.0)).level == OK  # only two intervals
    assert policy.decide(_flat(50.0, 4, full_rate=20.0)).level == STOP
    assert policy.decide(_flat(50.0, 10, full_rate=4.9)).level == OK


def test_without_psi_memory_rules_still_apply_and_a_reset_counter_gives_no_rate():
    readings = [replace(r, psi=None) for r in _flat(4.0, 3)]
    decision = WatchdogPolicy(GuardSettings()).decide(readings)
    assert decision.level == STOP and decision.full_rate_pct is None
    spiky = _flat(50.0, 4, full_rate=50.0)
    reset = replace(
        spiky[-1], psi=replace(spiky[-1].psi, full=replace(spiky[-1].psi.full, total_us=0))
    )
    assert WatchdogPolicy(GuardSettings()).decide([*spiky[:-1], reset]).level == OK


def test_reading_round_trips_through_a_dict():
    _, readings = recording("ramp_to_wedge")
    for r in readings[::20]:
        assert Reading.from_dict(r.to_dict()) == r


def test_readings_taken_faster_count_the_stall_rule_in_configured_periods():
    """The watchdog reads at 4 Hz inside the warn band. A full-stall burst of three quarter-
    second intervals is three readings in a row over 5 %, but not three configured (1 s)
    periods: no stop. Sustained over three periods, it stops."""
    policy = WatchdogPolicy(GuardSettings())
    quarter = [replace(r, t=r.t / 4) for r in _flat(9.0, 13)]  # 4 Hz, no stall yet
    burst = []
    for i, r in enumerate(quarter):  # stalled 80 % of the time over the last 0.75 s only
        stalled = max(0, i - 9) * 0.25 * 0.8
        burst.append(
            replace(r, psi=replace(r.psi, full=replace(r.psi.full, total_us=int(stalled * 1e6))))
        )
    assert policy.decide(burst).level == STOP  # counted per reading it would have stopped
    decision = policy.decide(burst, interval_s=1.0)
    assert decision.level == WARN and not decision.stop_conditions_met
    sustained = []
    for r in quarter:
        stalled = r.t * 0.8
        sustained.append(
            replace(r, psi=replace(r.psi, full=replace(r.psi.full, total_us=int(stalled * 1e6))))
        )
    assert policy.decide(sustained, interval_s=1.0).level == STOP


def test_the_watchdog_reads_four_times_a_second_inside_the_warn_band():
    """Configured at 1 Hz: an OK host is read once a second, a host in the warn band (here
    MemAvailable 9 % < 10 %) four times, so a crossing is seen within a quarter second."""
    import threading
    import time

    def reads_in(pct: float, seconds: float) -> int:
        reading = _flat(pct, 1)[0]
        taken: list[float] = []

        def read() -> Reading:
            taken.append(time.monotonic())
            return replace(reading, t=time.monotonic())

        dog = Watchdog(
            WatchdogPolicy(GuardSettings()),
            read,
            lambda: None,
            engine="t",
            record=lambda *a, **k: None,
        )
        until = threading.Event()
        timer = threading.Timer(seconds, until.set)
        timer.start()
        dog.run(until, lambda: 1.0)
        return len(taken)

    # the first read at once, then on the machine's shared ticks (sparkdeck.host.ticks),
    # the first of them at least half a period on: at 0, then 0.5-1.5 s, one second apart
    assert reads_in(50.0, 2.5) == 3
    # at 0, then 0.125-0.375 s, a quarter second apart: 10 or 11 reads in 2.5 s
    assert 10 <= reads_in(9.0, 2.5) <= 11
