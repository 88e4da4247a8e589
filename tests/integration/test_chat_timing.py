"""Chat tok/s on a busy machine: the client's figure against the server's own, with a CPU hog.

The server (tests/support/timed_server, variant `timings`) runs in its own process and sends
one token every 1/3000 s, then reports its own decode rate the way llama-server does
(`timings.predicted_per_second`). Beside the test, one busy-looping process per core keeps
every CPU taken, as other work on a user's machine does. The figure the user is shown, in the
CLI's figures line and in the TUI chat pane's caption, must be within 5 % of the server's.
Before the reader thread, the pane's figure came out several times too high: its worker,
sharing the GIL with the screen, stamped events in bursts as it parsed them.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from textual.widgets import Input

from tests.support.chat_pane_pilot import SIZE, send_message
from tests.support.pane_host import PaneHost, wait_until
from tests.support.timed_server import running

DECODE_RATE = 3000.0
TOKENS = 6000  # a reply of about 2 s: the reader's stamp 40 ms late (its GIL held by a
# preempted thread) moves the rate 2 %
TOLERANCE = 0.05
_FIGURES = re.compile(r"([\d.]+) tok/s \(server ([\d.]+)\)")


@pytest.fixture(scope="module")
def server() -> Iterator[str]:
    with running("timings", prefill_rate=50_000.0, decode_rate=DECODE_RATE) as url:
        yield url


@pytest.fixture
def cpu_hog() -> Iterator[None]:
    """One busy loop per core for the length of the test, ended by its own process ids."""
    hogs = [
        subprocess.Popen([sys.executable, "-c", "while True: pass"])
        for _ in range(os.cpu_count() or 2)
    ]
    try:
        yield
    finally:
        for hog in hogs:
            hog.kill()
        for hog in hogs:
            hog.wait(timeout=10)


def _figures(text: str) -> tuple[float, float]:
    found = _FIGURES.search(text)
    assert found, f"no 'tok/s (server ...)' figure in {text!r}"
    return float(found.group(1)), float(found.group(2))


def test_cli_figure_matches_the_servers_under_cpu_load(server, cpu_hog):
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "sparkdeck",
            "chat",
            "--endpoint",
            server,
            "--kind",
            "openai",
            "--max-tokens",
            str(TOKENS),
            "count",
        ],
        capture_output=True,
        text=True,
        timeout=120,
        stdin=subprocess.DEVNULL,
        cwd=Path(__file__).resolve().parents[2],
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.count(" w") == TOKENS
    client, reported = _figures(done.stderr)
    print(f"CLI: client {client} tok/s, server {reported} tok/s")
    assert reported == pytest.approx(DECODE_RATE, rel=0.1)  # the server kept its pace
    assert client == pytest.approx(reported, rel=TOLERANCE)


@pytest.mark.anyio
async def test_chat_pane_figure_matches_the_servers_under_cpu_load(server, cpu_hog):
    app = PaneHost(server, kind="openai", save=False)
    async with app.run_test(size=SIZE) as pilot:
        app.query_one("#chat-max-tokens", Input).value = str(TOKENS)
        view = await send_message(pilot, "count")
        await wait_until(
            pilot, lambda: not app.pane.streaming, timeout=120, what="the reply to end"
        )
        caption = str(view.caption.render())
    assert not app.worker_errors
    client, reported = _figures(caption)
    print(f"TUI: client {client} tok/s, server {reported} tok/s ({caption})")
    assert reported == pytest.approx(DECODE_RATE, rel=0.1)
    assert client == pytest.approx(reported, rel=TOLERANCE)
