"""The at-a-glance strip: memory, PSI, engine and GPU on screen whatever tab is open.

Telemetry comes from the NVML recording of a real H200 under a power-capped load (the
recorder's fixture) and Spark-shaped /proc text (a labelled fake: there is no Spark here).
The engine part is fed EngineMetrics snapshots as the metrics tab's sampler produces them
(that sampler's reading of real engines is tested in tests/integration/test_metrics_*.py).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from sparkdeck.config.settings import GuardSettings
from sparkdeck.ui.dashboard.side_tabs import Sampling
from sparkdeck.ui.readers import EngineReading
from sparkdeck.ui.strip.glance import GAP, GlanceStrip, glance_content, glance_parts
from tests.support.offline_app import make_app, text_of
from tests.support.pane_host import wait_until
from tests.support.telemetry import NVML_FIXTURES, fixed_memory, replay_history, replay_sampler

CLOCK_EVENTS = NVML_FIXTURES / "h200_clock_events.json"
HOUR = 3600.0


def sample(index: int = 12):
    sampler = replay_sampler(CLOCK_EVENTS, index)
    sampler.sample()  # a second reading gives PSI its rate
    return sampler.sample()


def test_the_words_name_memory_pressure_engine_and_throttle() -> None:
    snapshot = sample()
    parts = glance_parts(snapshot, {}, EngineReading(None), (), GuardSettings())
    line = glance_content(parts, 200).plain
    assert "avail 40.0 GiB 33%" in line  # MemAvailable 41943040 kB of 127615312 kB
    assert "PSI " in line and "/" in line
    assert "engine none" in line
    assert "GPU 1440 MHz 693 W 61°C power cap" in line  # the recorder's verdict, not raw bits
    assert [p.level for p in parts][3] == "warning"


def test_memory_takes_the_guards_colour() -> None:
    snapshot = sample()
    total = fixed_memory().total
    for available, level in ((0.5, "success"), (0.10, "warning"), (0.03, "error")):
        memory = dataclasses.replace(snapshot.memory, available=int(total * available))
        low = dataclasses.replace(snapshot, memory=memory)
        part = glance_parts(low, {}, None, (), GuardSettings())[0]
        assert part.level == level, (available, part)


def test_narrow_widths_drop_sparklines_then_wrap_never_overflow() -> None:
    recorded = replay_history(CLOCK_EVENTS)
    history = recorded.frozen()
    parts = glance_parts(sample(), history, EngineReading(None), (), GuardSettings())
    for width in (200, 120, 100, 80, 60, 40):
        text = glance_content(parts, width).plain
        for line in text.splitlines():
            assert len(line) <= width, (width, line)
        assert "avail" in text and "PSI" in text and "engine" in text and "GPU" in text
    assert glance_content(parts, 80).plain.count("\n") <= 1  # two lines at 80 columns
    assert GAP in glance_content(parts, 200).plain


@pytest.mark.anyio
async def test_the_strip_stays_on_screen_on_every_tab_and_draws_the_tabs_own_sample(
    tmp_path: Path,
) -> None:
    sampler = replay_sampler(CLOCK_EVENTS, 12)
    app, _ = make_app(tmp_path, sampling=Sampling(sampler, replay_history(CLOCK_EVENTS), 0.2, 0.2))
    calls = {"n": 0}
    real_sample = sampler.sample

    def counted():  # the real sampler, counted: the strip must not add readings
        calls["n"] += 1
        return real_sample()

    sampler.sample = counted

    async def scenario() -> None:
        async with app.run_test(size=(80, 24)) as pilot:
            strip = app.query_one(GlanceStrip)
            await wait_until(pilot, lambda: "1440 MHz" in text_of(strip), what="a GPU sample")
            for key in ("e", "c", "g", "m"):
                await pilot.press(key)
                await wait_until(  # laid out on the new tab (a fixed pause is a race under load)
                    pilot,
                    lambda: strip.region.height >= 1 and strip.region.y <= 2,
                    what=lambda key=key: f"the strip at the top on tab {key}: {strip.region}",
                )
                assert "avail 40.0 GiB" in text_of(strip)
            # the memory panel and the strip drew the same reading
            assert "40.0 GiB" in text_of(app.query_one("#memory-bars"))
            before = calls["n"]
            await pilot.pause(1.0)
            # 0.2 s period: about 5 readings a second, for the panels and the strip together
            assert 3 <= calls["n"] - before <= 7, calls["n"] - before

    await scenario()


def test_the_engine_part_shows_state_tok_s_and_queue() -> None:
    from sparkdeck.metrics.snapshot import EngineMetrics
    from sparkdeck.runtime.state import EngineState  # noqa: F401  (the reading's engine)

    trail = tuple(
        EngineMetrics("llamacpp", "ok", float(t), generation_tps=tps, running=2.0, waiting=1.0)
        for t, tps in enumerate((10.0, 250.0, 812.4))
    )
    part = glance_parts(None, {}, EngineReading(None), trail, GuardSettings())[2]
    assert part.value == "attached 812 tok/s q 2+1" and part.level == "success"
    assert list(part.series) == [10.0, 250.0, 812.4]
    off = (EngineMetrics("vllm", "metrics-off", 0.0),)
    assert glance_parts(None, {}, EngineReading(None), off, GuardSettings())[2].value == (
        "attached"
    )
