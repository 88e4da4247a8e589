"""`sparkdeck web` in a real headless browser: Debian's chromium driven by Playwright.

The server is the real CLI command in a subprocess (textual-serve, aiohttp) on a free
loopback port; each browser connection starts a real `sparkdeck` process behind it. What the
dashboard draws travels as terminal output over the page's websocket, which the test reads
(the page paints it on a canvas): the panels' words, then the help after a key press in the
page. On every address the site answers only with the token the server printed (then its
cookie), from its own Host and Origin; the doors are also tried with raw requests, a raw
websocket, a page of another origin in the same browser, and as a second Unix user.
No browser is downloaded: Playwright launches /usr/bin/chromium (.ci/run installs it).
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from importlib.metadata import distribution
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import aiohttp
import httpx
import pytest

from tests.conftest import free_port, unavailable
from tests.support.other_user import run_as_other_user, uid_of_other_user

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
ANSI = re.compile(rb"\x1b(\[[0-9;?$]*[ -/]*[@-~]|\][^\x07]*\x07|[()][0-9A-Za-z])")
# docs/web.png is this test's screenshot: SPARKDECK_WEB_SCREENSHOT=docs/web.png keeps it
SCREENSHOT_TO = os.environ.get("SPARKDECK_WEB_SCREENSHOT")


@dataclass
class WebServer:
    """A running `sparkdeck web`: its process, the URL it printed (with the token), and
    where its stdout and stderr went."""

    process: subprocess.Popen[bytes]
    address: str
    port: int
    output: Path

    @property
    def token(self) -> str:
        return parse_qs(urlsplit(self.address).query)["token"][0]

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def cookie(self) -> dict[str, str]:
        return {f"sparkdeck-web-{self.port}": self.token}

    def stop(self) -> str:
        """Stop the server; everything it wrote, stdout and stderr."""
        self.process.terminate()
        self.process.wait(timeout=10)
        return self.output.read_text(errors="replace")


def start(args: list[str], port: int, output: Path) -> WebServer:
    """Run `sparkdeck web ARGS`, its output into a file (read back whole at the end)."""
    with output.open("wb") as sink:
        process = subprocess.Popen(
            [sys.executable, "-m", "sparkdeck", "web", *args],
            stdout=sink,
            stderr=subprocess.STDOUT,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        found = re.search(r"open (http://\S+)", output.read_text(errors="replace"))
        if found:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
                return WebServer(process, found.group(1), port, output)
            except OSError:
                pass
        time.sleep(0.1)
    process.kill()
    raise AssertionError(f"sparkdeck web did not listen on {port}: {output.read_text()}")


@pytest.fixture
def web_server(tmp_path: Path) -> Iterator[WebServer]:
    port = free_port()
    server = start(["--port", str(port)], port, tmp_path / "web.out")
    try:
        yield server
    finally:
        if server.process.poll() is None:
            server.stop()


def ws_headers() -> dict[str, str]:
    return {
        "Upgrade": "websocket",
        "Connection": "Upgrade",
        "Sec-WebSocket-Version": "13",
        "Sec-WebSocket-Key": "dGhlIHNhbXBsZSBub25jZQ==",
    }


def test_loopback_needs_the_token_then_its_cookie(web_server: WebServer) -> None:
    server = web_server
    assert server.address == f"http://127.0.0.1:{server.port}/?token={server.token}"
    assert len(server.token) >= 24
    wrong = server.token[:-1] + ("y" if server.token[-1] != "y" else "z")
    for path in ("/", "/static/js/textual.js", f"/?token={wrong}"):
        assert httpx.get(server.base + path).status_code == 403, path
    assert (
        httpx.get(server.base + "/ws", headers={**ws_headers(), "Origin": server.base}).status_code
        == 403
    )
    # the printed URL: a cookie, and the same page without the token in its address
    first = httpx.get(server.address)
    assert first.status_code == 302 and first.headers["location"] == "/"
    set_cookie = first.headers["set-cookie"]
    assert f"sparkdeck-web-{server.port}={server.token}" in set_cookie
    assert "HttpOnly" in set_cookie and "SameSite=Strict" in set_cookie
    with httpx.Client(cookies=server.cookie) as browser:
        page = browser.get(server.base + "/")
        assert page.status_code == 200
        assert f'data-session-websocket-url="ws://127.0.0.1:{server.port}/ws"' in page.text
        # the terminal's JavaScript comes from textual-serve's wheel (its RECORD lists it,
        # so pip installed it from the wheel, not from a CDN at run time)
        shipped = {str(f) for f in distribution("textual-serve").files or ()}
        assert {
            "textual_serve/static/js/textual.js",
            "textual_serve/static/css/xterm.css",
            "textual_serve/templates/app_index.html",
        } <= shipped
        script = browser.get(server.base + "/static/js/textual.js")
        assert script.status_code == 200 and len(script.content) > 100_000
        # reached as localhost, the page's own URLs say localhost (where its cookie goes)
        local = httpx.get(
            f"http://localhost:{server.port}/",
            headers={"Cookie": f"sparkdeck-web-{server.port}={server.token}"},
        )
        assert f'"ws://localhost:{server.port}/ws"' in local.text
    assert server.stop().count(server.token) == 1  # printed once, at start


@pytest.mark.anyio
async def test_host_and_origin_are_checked_even_with_the_cookie(web_server: WebServer) -> None:
    server = web_server
    with httpx.Client(cookies=server.cookie) as browser:
        assert browser.get(server.base + "/").status_code == 200
        # DNS rebinding: a page at evil.example that resolves to 127.0.0.1
        rebound = browser.get(server.base + "/", headers={"Host": f"evil.example:{server.port}"})
        assert rebound.status_code == 403 and "Host" in rebound.text
        assert (
            browser.get(
                server.base + "/", headers={"Host": f"127.0.0.1:{server.port + 1}"}
            ).status_code
            == 403
        )
        assert (
            browser.get(server.base + "/", headers={"Origin": "http://evil.example"}).status_code
            == 403
        )

    async def handshake(origin: str | None) -> int | bytes:
        """A raw websocket: the status it was refused with, or what the dashboard sent."""
        async with aiohttp.ClientSession(cookies=server.cookie) as session:
            try:
                async with session.ws_connect(
                    f"{server.base}/ws?width=80&height=24", origin=origin
                ) as ws:
                    message = await asyncio.wait_for(ws.receive(), timeout=30)
                    return message.data if isinstance(message.data, bytes) else b"?"
            except aiohttp.WSServerHandshakeError as exc:
                return exc.status

    assert await handshake("http://evil.example") == 403
    assert await handshake(f"http://127.0.0.1:{server.port + 1}") == 403  # other port
    assert await handshake("null") == 403
    assert await handshake(None) == 403
    # the same handshake from the server's own origin is the dashboard (bytes of a screen)
    own = await handshake(server.base)
    assert isinstance(own, bytes) and own


def test_a_plain_get_of_the_websocket_is_refused_without_a_traceback(web_server: WebServer) -> None:
    server = web_server
    for _ in range(3):
        plain = httpx.get(f"{server.base}/ws?token={server.token}", headers={"Origin": server.base})
        assert plain.status_code == 400
        assert (
            httpx.get(
                f"{server.base}/ws", cookies=server.cookie, headers={"Origin": server.base}
            ).status_code
            == 400
        )
    output = server.stop()
    assert "Traceback" not in output and "Error" not in output
    assert output.count(server.token) == 1  # the one printed line


def test_another_unix_user_cannot_get_in(web_server: WebServer) -> None:
    """As a second Unix user made here: no page, no file, no websocket from any Origin."""
    source = (Path(__file__).parents[1] / "support" / "door_probe.py").read_text()
    answers = json.loads(run_as_other_user(source, str(web_server.port)))
    assert answers.pop("uid") == uid_of_other_user() != os.getuid()
    assert answers == dict.fromkeys(answers, 403) and len(answers) == 6, answers


def test_another_address_needs_the_token_too(tmp_path: Path) -> None:
    port = free_port()
    server = start(
        ["--host", "0.0.0.0", "--port", str(port), "--public-url", f"http://127.0.0.1:{port}"],
        port,
        tmp_path / "web.out",
    )
    try:
        assert server.address == f"http://127.0.0.1:{port}/?token={server.token}"
        for path in ("/", "/ws", "/static/js/textual.js"):
            assert httpx.get(server.base + path).status_code == 403, path
        with httpx.Client() as browser:
            assert browser.get(server.address).status_code == 302
            page = browser.get(server.base + "/")
            assert page.status_code == 200
            assert f'ws://127.0.0.1:{port}/ws"' in page.text
            assert browser.get(server.base + "/static/js/textual.js").status_code == 200
            # this machine's own name is one of the addresses it is reached at
            named = browser.get(
                server.base + "/", headers={"Host": f"{socket.gethostname()}:{port}"}
            )
            assert named.status_code == 200
            assert (
                browser.get(server.base + "/", headers={"Host": f"evil.example:{port}"}).status_code
                == 403
            )
    finally:
        output = server.stop()
    assert output.count(server.token) == 1  # printed once, at start


def test_the_dashboard_runs_in_headless_chromium(web_server: WebServer, tmp_path: Path) -> None:
    if not Path(CHROMIUM).exists() or shutil.which("chromium") is None:
        unavailable("Debian's chromium is not installed (apt-get install -y chromium)")
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        unavailable("playwright (pip install playwright) is not installed")

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            context = browser.new_context(viewport={"width": 1400, "height": 900})
            page = context.new_page()
            received: list[bytes] = []
            page.on(
                "websocket",
                lambda ws: ws.on(
                    "framereceived",
                    lambda frame: received.append(
                        frame if isinstance(frame, bytes) else frame.encode()
                    ),
                ),
            )

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

            page.goto(web_server.address)
            assert page.url == web_server.base + "/"  # the token left the address bar
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
            # a reload needs no token: the cookie the first visit set
            page.reload()
            page.wait_for_selector(".textual-terminal.-connected", timeout=30_000)
            # a page of another origin in the same browser (another port of 127.0.0.1:
            # the same site, so the cookie goes with its request) cannot open the websocket
            with other_origin_page(web_server.port) as evil:
                probe = context.new_page()
                probe.goto(evil)
                probe.wait_for_function("document.title !== 'waiting'", timeout=30_000)
                assert probe.title() == "refused"
        finally:
            browser.close()


@contextmanager
def other_origin_page(target_port: int) -> Iterator[str]:
    """A page on another loopback port whose script tries the dashboard's websocket and
    puts "opened" or "refused" in its title."""
    script = (
        f"<title>waiting</title><script>const ws = new WebSocket("
        f"'ws://127.0.0.1:{target_port}/ws');"
        "ws.onopen = () => { document.title = 'opened'; };"
        "ws.onerror = () => { if (document.title === 'waiting') "
        "document.title = 'refused'; };</script>"
    ).encode()

    class Page(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(200)
            self.send_header("Content-Type", "text/html")
            self.send_header("Content-Length", str(len(script)))
            self.end_headers()
            self.wfile.write(script)

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Page)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/"
    finally:
        server.shutdown()
        server.server_close()
