"""Run the flight recorder on a real GPU under load and write down nvidia-smi beside it.

Run on a machine with an NVIDIA driver (the lent H200; see TESTING.md "A real GPU"):

    python3 tools/record_flight.py OUT_DIR [--idle 4] [--load 10]

A real `FlightRecorder` records real `TelemetrySampler` samples (NVML through sparkdeck's own
reader, /proc of that machine) once a second: `--idle` seconds with the GPU idle, then
`--load` seconds under an 8192x8192 bf16 matmul loop in a child process (tools/record_nvml.py's
load). Right after each sample, `nvidia-smi --query-gpu` reads the same figures, so a test can
hold the recorded rows against NVIDIA's own tool, second by second. The rows are read back
from the closed recording (sparkdeck.recorder.query), so what is checked is what was stored.

Written: OUT_DIR/h200_flight.json (rows, nvidia-smi lines, machine). The recording itself
(OUT_DIR/flight-recorder.sqlite) is left there too.
"""

from __future__ import annotations

import argparse
import json
import platform
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tools.record_nvml import LOAD_SCRIPT  # noqa: E402

# clocks_event_reasons.active is the driver-535+ name; older drivers call it throttle
SMI_FIELDS = (
    "timestamp,clocks.sm,clocks.max.sm,power.draw,temperature.gpu,utilization.gpu,{reasons}"
)


def smi_line() -> str:
    for reasons in ("clocks_event_reasons.active", "clocks_throttle_reasons.active"):
        done = subprocess.run(
            [
                "nvidia-smi",
                "--query-gpu=" + SMI_FIELDS.format(reasons=reasons),
                "--format=csv,noheader,nounits",
            ],
            capture_output=True,
            text=True,
            timeout=30,
        )
        if done.returncode == 0:
            return done.stdout.strip().splitlines()[0]
    return f"error: {done.stderr.strip()}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--idle", type=int, default=4)
    parser.add_argument("--load", type=int, default=10)
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)

    from sparkdeck.recorder import FlightRecorder
    from sparkdeck.recorder.query import rows_between
    from sparkdeck.telemetry.sampler import TelemetrySampler

    db = args.out / "flight-recorder.sqlite"
    recorder, _ = FlightRecorder.open(db)
    sampler = TelemetrySampler()
    smi: list[dict[str, object]] = []
    started = time.time()

    def tick(state: str) -> None:
        row = recorder.record(sampler.sample(), state, None)
        smi.append({"t": row.t, "line": smi_line()})
        print(
            json.dumps(
                {
                    "state": state,
                    "sm": row.gpu_sm_mhz,
                    "w": row.gpu_power_w,
                    "reasons": row.gpu_reasons,
                    "smi": smi[-1]["line"],
                }
            ),
            flush=True,
        )
        time.sleep(max(0.0, 1.0 - (time.time() - row.t)))

    for _ in range(args.idle):
        tick("idle")
    load = subprocess.Popen(
        [sys.executable, "-c", LOAD_SCRIPT, str(args.load + 60), "8192"],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert load.stdout is not None
    kind = load.stdout.readline().strip().removeprefix("READY ")
    try:
        time.sleep(2.0)  # past the ramp-up
        for _ in range(args.load):
            tick("matmul load")
    finally:
        load.terminate()
        load.wait(timeout=30)
    recorder.close()
    sampler.close()
    rows = [r.to_dict() for r in rows_between(db, started - 1)]
    (args.out / "h200_flight.json").write_text(
        json.dumps(
            {
                "_note": (
                    "Recorded by tools/record_flight.py on a real GPU machine: the flight "
                    "recorder's rows read back from its SQLite file, and after each sample "
                    "nvidia-smi --query-gpu (" + SMI_FIELDS.format(reasons="reasons") + ")."
                ),
                "recorded_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                "machine": {
                    "host": platform.node(),
                    "kernel": platform.release(),
                    "python": platform.python_version(),
                    "load": kind,
                },
                "rows": rows,
                "nvidia_smi": smi,
            },
            indent=1,
        )
        + "\n"
    )
    print(f"wrote {args.out / 'h200_flight.json'} ({len(rows)} rows)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
