"""What the TUI imports before its first frame.

The first frame's target is within 0.15 s of a bare Textual app (benchmarks/tui_idle.py,
docs/performance.md), and on the 2-core test machine each frozen dataclass costs ~0.6 ms to
build at import. So the dashboard's modules name the launch machinery (the plan, its
events, the preset files' reader and every engine kind under it) only as types: the reader
loads in the "load presets" worker and the launch modules with the first plan, both after
the first frame. A top-level import of any of them in a UI module fails this test.
"""

from __future__ import annotations

import json
import subprocess
import sys

DEFERRED = ("sparkdeck.presets", "sparkdeck.engines", "sparkdeck.launch.plan",
            "sparkdeck.launch.events", "sparkdeck.launch.sequence", "sparkdeck.runtime.spec",
            "sparkdeck.guard.fit", "sparkdeck.guard.switch", "docker", "httpx")


def test_the_tui_entry_module_loads_no_launch_machinery() -> None:
    code = ("import json, sys; import sparkdeck.ui.run; "
            f"print(json.dumps(sorted(m for m in {DEFERRED!r} if m in sys.modules)))")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            timeout=60)
    assert result.returncode == 0, result.stderr[-2000:]
    assert json.loads(result.stdout) == []


def test_the_deferred_modules_still_load_where_they_are_needed() -> None:
    # the other side: the names the UI holds as types resolve once their modules load
    code = ("import sparkdeck.ui.run, sparkdeck.ui.messages as m, sys; "
            "catalog = m.read_presets(); "
            "import sparkdeck.ui.dashboard.card_steps, sparkdeck.ui.dashboard.launch_hooks; "
            "print(len(catalog.presets), 'sparkdeck.presets' in sys.modules)")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            timeout=60)
    assert result.returncode == 0, result.stderr[-2000:]
    count, loaded = result.stdout.split()
    assert int(count) > 0 and loaded == "True"
