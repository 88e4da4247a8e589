"""What the TUI loads while it sits idle with Docker reachable and no engine running.

Resident memory is one of the TUI's targets (<= 60 MiB idle, docs/performance.md): httpx
alone is ~7 MiB there (its package also loads click, pygments' lexers and rich.syntax for
its command line). Nothing idle needs HTTP when no engine runs: the engine poll asks Docker
(its SDK speaks through requests), and httpx loads with the first health check, readiness
wait, chat or metrics read. The benchmark screen loads when it is first opened.

The app runs in a fresh interpreter (this test process has long loaded everything) against
the real Docker daemon, in a scope of its own, until two engine polls have answered.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import docker
import pytest

IDLE_APP = """
import asyncio, json, sys
from pathlib import Path
from sparkdeck.runtime.client import DockerRuntime
from sparkdeck.ui.app import SparkdeckApp
from sparkdeck.ui.readers import EngineReading

polls = []

class Counting(SparkdeckApp):
    CSS_PATH = str(Path(sys.modules["sparkdeck.ui.app"].__file__).with_name("sparkdeck.tcss"))
    def on_engine_state_read(self, message):
        polls.append(message.reading)
        super().on_engine_state_read(message)

reads = []

async def main():
    app = Counting(runtime_factory=lambda: DockerRuntime.connect(scope=sys.argv[1]),
                   engine_poll_seconds=0.2)
    read = app._engine_reader.read
    app._engine_reader.read = lambda: reads.append(read()) or reads[-1]
    async with app.run_test(size=(120, 40)) as pilot:
        for _ in range(300):
            await pilot.pause(0.1)
            if len(reads) >= 2:
                break
        await pilot.pause(0.5)  # the chat target read that follows each poll
        print(json.dumps({"polls": len(reads), "posted": len(polls),
                          "engine": [p.engine is not None for p in reads],
                          "loaded": sorted(m for m in sys.modules if m in (
                              "httpx", "sparkdeck.ui.bench.view", "sparkdeck.bench.store"))}))

asyncio.run(main())
"""


pytestmark = pytest.mark.docker


def test_idle_tui_without_an_engine_loads_no_http_client(
    docker_client: docker.DockerClient, scope: str, tmp_path: Path
) -> None:
    env = dict(
        os.environ,
        SPARKDECK_CONFIG_DIR=str(tmp_path / "config"),
        SPARKDECK_DATA_DIR=str(tmp_path / "data"),
    )
    script = tmp_path / "idle_app.py"  # a file: Textual reads the app class's source path
    script.write_text(IDLE_APP)
    result = subprocess.run(
        [sys.executable, str(script), scope], env=env, capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stderr[-3000:]
    seen = json.loads(result.stdout.strip().splitlines()[-1])
    assert seen["polls"] >= 2 and not any(seen["engine"]), seen  # Docker answered: no engine
    assert seen["posted"] == 1, seen  # the same answer again is not news for the window
    assert seen["loaded"] == [], seen
