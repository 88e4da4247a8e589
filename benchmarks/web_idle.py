"""CPU of `sparkdeck web` with one browser connected, measured from outside.

Starts the real `sparkdeck web` on a free loopback port, opens the page in Debian's headless
chromium (Playwright, no browser download), waits until the dashboard is drawing, then reads
utime+stime from /proc over a window (default 30 s) for: the web server (textual-serve's
aiohttp process, which relays the screen to the websocket) and the sparkdeck process it
started for this connection (the same dashboard as in a terminal, drawing through Textual's
web driver), each as a percentage of one core. The browser's own CPU is not sparkdeck's and
is not counted.

Usage: .venv/bin/python benchmarks/web_idle.py [--seconds 30] [--runs 1]
"""

from __future__ import annotations

import argparse
import os
import re
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil

CHROMIUM = "/usr/bin/chromium"
ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def cpu_seconds(process: psutil.Process) -> float:
    times = process.cpu_times()
    return times.user + times.system


def one_run(seconds: float, tmp: Path) -> tuple[float, float]:
    from playwright.sync_api import sync_playwright

    port = free_port()
    env = {
        **os.environ,
        "SPARKDECK_CONFIG_DIR": str(tmp / "config"),
        "SPARKDECK_DATA_DIR": str(tmp / "data"),
    }
    server = subprocess.Popen(
        [sys.executable, "-m", "sparkdeck", "web", "--port", str(port)],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        env=env,
        text=True,
    )
    try:
        assert server.stdout is not None
        printed = re.search(r"open (http://\S+)", server.stdout.readline())
        if printed is None:
            raise SystemExit("sparkdeck web printed no URL")
        deadline = time.monotonic() + 20
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise SystemExit("sparkdeck web did not start") from None
                time.sleep(0.1)
        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(executable_path=CHROMIUM, args=ARGS)
            page = browser.new_page(viewport={"width": 1400, "height": 900})
            page.goto(printed.group(1))  # the URL with its token
            page.wait_for_selector(".textual-terminal.-connected", timeout=30_000)
            page.wait_for_timeout(8_000)  # start-up work done, every panel live
            relay = psutil.Process(server.pid)
            apps = relay.children(recursive=True)
            if not apps:
                raise SystemExit("no sparkdeck process behind the connection")
            before = (cpu_seconds(relay), sum(cpu_seconds(p) for p in apps), time.monotonic())
            page.wait_for_timeout(seconds * 1000)
            wall = time.monotonic() - before[2]
            relay_pct = 100 * (cpu_seconds(relay) - before[0]) / wall
            app_pct = 100 * (sum(cpu_seconds(p) for p in apps) - before[1]) / wall
            browser.close()
        return relay_pct, app_pct
    finally:
        server.terminate()
        server.wait(timeout=10)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=30.0)
    parser.add_argument("--runs", type=int, default=1)
    args = parser.parse_args()
    if not Path(CHROMIUM).exists():
        raise SystemExit("needs Debian's chromium: apt-get install -y chromium")
    load = Path("/proc/loadavg").read_text().split()[:3]
    print(
        f"sparkdeck web, one headless chromium connected at 1400x900, window "
        f"{args.seconds:.0f} s, {os.cpu_count()} CPUs, load average {' '.join(load)}"
    )
    with tempfile.TemporaryDirectory(prefix="sparkdeck-web-") as tmp:
        for run in range(1, args.runs + 1):
            relay, app = one_run(args.seconds, Path(tmp))
            print(
                f"run {run}: web server {relay:.2f} % of one core, its sparkdeck process "
                f"{app:.2f} % (together {relay + app:.2f} %)",
                flush=True,
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
