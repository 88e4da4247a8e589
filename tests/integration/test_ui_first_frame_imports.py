"""What the TUI imports before its first frame.

The first frame's target is within 0.15 s of a bare Textual app (benchmarks/tui_idle.py,
docs/performance.md), and on the 2-core test machine each frozen dataclass costs ~0.6 ms to
build at import. So the dashboard's modules name the launch machinery (the plan, its
events, the preset files' reader and every engine kind under it) only as types: the reader
loads in the "load presets" worker and the launch modules with the first plan, both after
the first frame. The side tabs (their modules, the telemetry sampler with NVML's and PSI's
readers, the guard's policy, Textual's TabbedContent) load when they are mounted, right
after the first frame (sparkdeck.ui.screen_layout). A top-level import of any of them
in a module the first frame needs fails this test.
"""

from __future__ import annotations

import json
import subprocess
import sys

DEFERRED = (
    "sparkdeck.presets",
    "sparkdeck.engines",
    "sparkdeck.launch.plan",
    "sparkdeck.launch.events",
    "sparkdeck.launch.sequence",
    "sparkdeck.runtime.spec",
    "sparkdeck.guard.fit",
    "sparkdeck.guard.switch",
    "docker",
    "httpx",
    "sparkdeck.ui.dashboard.side_tabs",
    "sparkdeck.ui.machine.tab",
    "sparkdeck.ui.metrics.tab",
    "sparkdeck.ui.chat.tab",
    "sparkdeck.ui.guard.timeline",
    "sparkdeck.telemetry.sampler",
    "sparkdeck.host.nvml",
    "sparkdeck.host.psi",
    "sparkdeck.guard.policy",
    "textual.widgets._tabbed_content",
)


def fresh_interpreter(code: str) -> str:
    """What `code` prints, run in a new interpreter (nothing of this test process loaded)."""
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stderr[-2000:]
    return result.stdout


def test_the_tui_entry_module_loads_no_launch_machinery() -> None:
    code = (
        "import json, sys; import sparkdeck.ui.run; "
        f"print(json.dumps(sorted(m for m in {DEFERRED!r} if m in sys.modules)))"
    )
    assert json.loads(fresh_interpreter(code)) == []


def test_the_deferred_modules_still_load_where_they_are_needed() -> None:
    # the other side: the names the UI holds as types resolve once their modules load
    code = (
        "import sparkdeck.ui.run, sparkdeck.ui.messages as m, sys; "
        "catalog = m.read_presets(); "
        "import sparkdeck.ui.dashboard.card_steps, sparkdeck.ui.dashboard.launch_hooks; "
        "print(len(catalog.presets), 'sparkdeck.presets' in sys.modules)"
    )
    count, loaded = fresh_interpreter(code).split()
    assert int(count) > 0 and loaded == "True"


FIRST_FRAME = f"""
import asyncio, json, sys
import sparkdeck.ui.app as app_module
from sparkdeck.catalog import PresetCatalog
from sparkdeck.runtime.errors import DockerUnavailable

DEFERRED = {DEFERRED!r}
seen = {{}}
put_in_place = app_module.put_in_place


async def recording_put_in_place(stand_in, make):
    # runs right after the first refresh: what loaded until now is what the frame needed
    seen["at_first_frame"] = sorted(m for m in DEFERRED if m in sys.modules)
    seen["placeholder_shown"] = stand_in.is_attached
    return await put_in_place(stand_in, make)

app_module.put_in_place = recording_put_in_place


def no_docker():  # what connect raises without a daemon (its module is loaded already)
    raise DockerUnavailable("no Docker in this test")


async def main():
    app = app_module.SparkdeckApp(lambda: PresetCatalog({{}}, []), no_docker,
                                  lazy_side_tabs=True, engine_poll_seconds=3600)
    async with app.run_test(size=(120, 40)) as pilot:
        for _ in range(200):
            if app.side_tabs is not None and app.side_tabs.is_mounted:
                break
            await pilot.pause(0.05)
        seen["mounted"] = bool(app.query("#machine-tab")) and not app.query("#side-area-pending")
        seen["after"] = sorted(m for m in DEFERRED if m in sys.modules)

asyncio.run(main())
print(json.dumps(seen))
"""


def test_the_first_frame_is_drawn_before_the_side_tabs_load_and_they_follow() -> None:
    """The running app, not just its import: compose and the first refresh load none of the
    deferred modules; the side tabs then load and take the stand-in's place."""
    seen = json.loads(fresh_interpreter(FIRST_FRAME).strip().splitlines()[-1])
    assert seen["at_first_frame"] == [], seen
    assert seen["placeholder_shown"] and seen["mounted"], seen
    for module in (
        "sparkdeck.ui.dashboard.side_tabs",
        "sparkdeck.telemetry.sampler",
        "sparkdeck.host.nvml",
        "textual.widgets._tabbed_content",
    ):
        assert module in seen["after"], seen
