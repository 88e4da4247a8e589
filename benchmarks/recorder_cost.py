"""What the flight recorder costs per sample, and how big a week of it gets.

Real telemetry samples of this machine (TelemetrySampler: /proc/meminfo, PSI, NVML where a
driver is) go into a real FlightRecorder on disk, as the service does at 1 Hz. To measure a
few minutes of 1 Hz recording in seconds, the recorder's wall clock advances one second per
sample (an injected clock), so commits (with their fsync) fall every `commit_s` samples just
as they would at 1 Hz; the CPU time is the process's own (time.process_time), split into the
sampler's part and the recorder's part (row building, buffering, the amortised commit).

    .venv/bin/python benchmarks/recorder_cost.py [--samples 600]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from sparkdeck.recorder import FlightRecorder, RecorderLimits  # noqa: E402
from sparkdeck.recorder.store import db_size  # noqa: E402
from sparkdeck.telemetry.sampler import TelemetrySampler  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--samples", type=int, default=600)
    args = parser.parse_args()
    folder = Path(tempfile.mkdtemp(prefix="sparkdeck-recorder-bench-"))
    clock = [time.time()]
    recorder, _ = FlightRecorder.open(
        folder / "rec.sqlite", limits=RecorderLimits(), wall=lambda: clock[0]
    )
    sampler = TelemetrySampler()
    sampler.sample()  # the first sample has no PSI rate yet; not typical
    sample_ms, record_ms, commit_wall_ms = [], [], []
    for _ in range(args.samples):
        clock[0] += 1.0
        c0 = time.process_time()
        snapshot = sampler.sample()
        c1 = time.process_time()
        committed = recorder._last_commit  # moves when this call commits (and fsyncs)
        w0 = time.perf_counter()
        recorder.record(snapshot, "bench-engine running", 100.0)
        w1 = time.perf_counter()
        c2 = time.process_time()
        sample_ms.append((c1 - c0) * 1000)
        record_ms.append((c2 - c1) * 1000)
        if recorder._last_commit != committed:
            commit_wall_ms.append((w1 - w0) * 1000)
    recorder.close()
    sampler.close()
    size = db_size(folder / "rec.sqlite")
    per_row = size / args.samples
    print(
        f"samples: {args.samples} (1 Hz simulated, commit every {RecorderLimits().commit_s:.0f} s)"
    )
    print(
        f"sampler CPU per sample:  mean {statistics.mean(sample_ms):.3f} ms, "
        f"p99 {sorted(sample_ms)[int(0.99 * len(sample_ms))]:.3f} ms"
    )
    print(
        f"recorder CPU per sample: mean {statistics.mean(record_ms):.3f} ms, "
        f"p99 {sorted(record_ms)[int(0.99 * len(record_ms))]:.3f} ms"
    )
    if commit_wall_ms:
        print(
            f"commit wall time (incl. fsync): median {statistics.median(commit_wall_ms):.2f} "
            f"ms over {len(commit_wall_ms)} commits"
        )
    share = statistics.mean(record_ms) / 1000.0 * 100.0
    print(f"recorder share of one core at 1 Hz: {share:.3f} %")
    print(
        f"file: {size / 2**20:.2f} MiB for {args.samples} rows = {per_row:.0f} B/row; "
        f"7 days at 1 Hz ~ {per_row * 7 * 86400 / 2**20:.0f} MiB"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
