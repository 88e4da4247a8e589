"""A flight-recorder process as the service runs it (the real sampler, one row a second), to
kill or to let vanish without a clean stop.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent.parent  # the checkout: the child imports sparkdeck

# A recording process as the service runs it: the real sampler, one row a second.
RECORDING_CHILD = textwrap.dedent("""
    import sys, time
    from pathlib import Path
    from sparkdeck.recorder import FlightRecorder
    from sparkdeck.telemetry.sampler import TelemetrySampler
    recorder, _ = FlightRecorder.open(Path(sys.argv[1]))
    sampler = TelemetrySampler()
    mode = sys.argv[2]
    for n in range(10_000):
        row = recorder.record(sampler.sample(), "child-engine running", 42.0)
        print(f"{row.t:.3f}", flush=True)
        if mode == "vanish" and n == 2:
            recorder.flush()
            import os; os._exit(0)  # the process is gone without a clean stop (a freeze)
        time.sleep(1.0)
""")


def child(db: Path, mode: str = "run") -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-c", RECORDING_CHILD, str(db), mode],
        stdout=subprocess.PIPE,
        text=True,
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )
