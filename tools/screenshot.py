"""Export the README's dashboard screenshot (docs/dashboard.svg) from a real run of the app.

Runs the real app at 120x40 on this machine's real readers (/proc/meminfo, PSI, NVML or its
absence, spark_hwmon or its absence, the Docker daemon at DOCKER_HOST and the bundled
presets), waits until every panel has data and the sparklines have a few samples, and saves
the SVG Textual itself renders. Nothing on the screen is staged.

Usage: .venv/bin/python tools/screenshot.py [--out docs/dashboard.svg] [--seconds 8]
"""

from __future__ import annotations

import argparse
import asyncio
import time
from pathlib import Path

from sparkdeck.ui.app import SparkdeckApp

ROOT = Path(__file__).resolve().parent.parent


async def capture(out: Path, seconds: float) -> None:
    app = SparkdeckApp()
    async with app.run_test(size=(120, 40)) as pilot:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            gpu = str(app.query_one("#gpu-rows").content)
            env = str(app.query_one("#environment-panel").content)
            if "reading" not in gpu and "checking" not in env:
                break
            await pilot.pause(0.1)
        await pilot.pause(seconds)  # a few samples of history in the sparklines
        out.parent.mkdir(parents=True, exist_ok=True)
        app.save_screenshot(filename=out.name, path=str(out.parent))
    print(f"wrote {out}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "dashboard.svg")
    parser.add_argument("--seconds", type=float, default=8.0)
    args = parser.parse_args()
    asyncio.run(capture(args.out, args.seconds))


if __name__ == "__main__":
    main()
