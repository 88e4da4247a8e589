"""`sparkdeck web` in a real headless browser: Debian's chromium driven by Playwright.

The server is the real CLI command in a subprocess (textual-serve, aiohttp) on a free
loopback port; each browser connection starts a real `sparkdeck` process behind it. What the
dashboard draws travels as terminal output over the page's websocket, which the test reads
(the page paints it on a canvas): the panels' words, then the help after a key press in the
page. Off loopback the site answers only under the token the server printed.
No browser is downloaded: Playwright launches /usr/bin/chromium (.ci/run installs it).
"""

from __future__ import annotations

import os
import re
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from importlib.metadata import distribution
from pathlib import Path

import httpx
import pytest

from tests.conftest import unavailable

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
                 "--no-first-run", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync"]
ANSI = re.compile(rb"\x1b(\[[0-9;?$]*[ -/]*[@-~]|\][^\x07]*\x07|[()][0-9A-Za-z])")
# docs/web.png is this test's screenshot: SPARKDECK_WEB_SCREENSHOT=docs/web.png keeps it
SCREENSHOT_TO = os.environ.get("SPARKDECK_WEB_SCREENSHOT")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def start(args: list[str], port: int) -> tuple[subprocess.Popen[str], str]:
    """Run `sparkdeck web ARGS`; return the process and the address it printed."""
    process = subprocess.Popen([sys.executable, "-m", "sparkdeck", "web", *args],
                               stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
                               env={**os.environ, "PYTHONUNBUFFERED": "1"})
    assert process.stdout is not None
    line = process.stdout.readline()
    found = re.search(r"open (http://\S+/)", line)
    assert found, line
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
            return process, found.group(1)
        except OSError:
            time.sleep(0.1)
    process.kill()
    raise AssertionError(f"sparkdeck web did not listen on {port}")


@pytest.fixture
def web_server() -> Iterator[str]:
    port = free_port()
    process, address = start(["--port", str(port)], port)
    try:
        yield address
    finally:
        process.terminate()
        process.wait(timeout=10)


def test_loopback_needs_no_token_and_serves_its_own_assets(web_server: str) -> None:
    assert web_server.startswith("http://127.0.0.1:")
    page = httpx.get(web_server)
    assert page.status_code == 200
    assert 'data-session-websocket-url="ws://127.0.0.1:' in page.text
    # the terminal's JavaScript comes from textual-serve's wheel (its RECORD lists it, so
    # pip installed it from the wheel, not from a CDN at run time), served by this server
    shipped = {str(f) for f in distribution("textual-serve").files or ()}
    assert {"textual_serve/static/js/textual.js", "textual_serve/static/css/xterm.css",
            "textual_serve/templates/app_index.html"} <= shipped
    script = httpx.get(f"{web_server}static/js/textual.js")
    assert script.status_code == 200 and len(script.content) > 100_000


def test_another_address_answers_only_under_the_printed_token() -> None:
    port = free_port()
    process, address = start(["--host", "0.0.0.0", "--port", str(port),
                              "--public-url", f"http://127.0.0.1:{port}"], port)
    try:
        token = address.rstrip("/").rsplit("/", 1)[-1]
        assert len(token) >= 24 and address == f"http://127.0.0.1:{port}/{token}/"
        base = f"http://127.0.0.1:{port}"
        # a token one character off (never the token itself: it may end in "x" already)
        wrong = token[:-1] + ("y" if token[-1] != "y" else "z")
        for path in ("/", "/ws", "/static/js/textual.js", f"/{wrong}/"):
            assert httpx.get(base + path).status_code == 403, path
        page = httpx.get(address)
        assert page.status_code == 200
        assert f'ws://127.0.0.1:{port}/{token}/ws"' in page.text  # the websocket too
        assert httpx.get(f"{address}static/js/textual.js").status_code == 200
    finally:
        process.terminate()
        out, _ = process.communicate(timeout=10)
    assert token not in out  # printed once, at start (the first line, read above)


def test_the_dashboard_runs_in_headless_chromium(web_server: str, tmp_path: Path) -> None:
    if not Path(CHROMIUM).exists() or shutil.which("chromium") is None:
        unavailable("Debian's chromium is not installed (apt-get install -y chromium)")
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        unavailable("playwright (pip install playwright) is not installed")

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            page = browser.new_page(viewport={"width": 1400, "height": 900})
            received: list[bytes] = []
            page.on("websocket", lambda ws: ws.on(
                "framereceived", lambda frame: received.append(
                    frame if isinstance(frame, bytes) else frame.encode())))

            def screen() -> bytes:
                """What the dashboard wrote so far, without its escape sequences."""
                return ANSI.sub(b"", b"".join(received))

            def screen_has(*words: bytes, timeout: float = 30.0) -> None:
                deadline = time.monotonic() + timeout
                while time.monotonic() < deadline:
                    if all(word in screen() for word in words):
                        return
                    page.wait_for_timeout(200)
                raise AssertionError(f"the page never showed {words}")

            page.goto(web_server)
            page.wait_for_selector(".textual-terminal.-connected", timeout=30_000)
            # the panels with data: the strip's and the memory panel's figures from
            # /proc/meminfo, the preset table
            screen_has(b"avail", b"unified memory", b"presets", b"GiB")
            deadline = time.monotonic() + 20
            while not re.search(rb"avail \d+\.\d GiB", screen()):
                assert time.monotonic() < deadline, "no memory figure on the page"
                page.wait_for_timeout(200)
            page.wait_for_timeout(500)
            shot = Path(SCREENSHOT_TO) if SCREENSHOT_TO else tmp_path / "web.png"
            page.screenshot(path=str(shot))
            assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and shot.stat().st_size > 20_000
            before = len(received)
            page.click(".textual-terminal")  # the terminal takes the keyboard
            page.keyboard.press("?")  # a key typed in the browser reaches the dashboard
            screen_has(b"sparkdeck keys", b"Launch the selected preset")
            assert any(b"sparkdeck keys" in frame for frame in received[before:])
        finally:
            browser.close()
