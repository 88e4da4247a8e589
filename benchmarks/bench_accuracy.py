"""How close `sparkdeck bench` comes to a server whose timing is known, and what it costs.

Runs the real CLI (a subprocess, as a user runs it) against tests/support/timed_server.py,
which sends its first content token prompt/prefill-rate seconds after a request arrives and
then one token every 1/decode-rate seconds, in each of its variants (usage at the end, an
empty role chunk first, no usage at all). Prints, per concurrency level, the figures the
benchmark reported next to the ones the server was set to, and the CPU time the sparkdeck
process used per request.

    .venv/bin/python benchmarks/bench_accuracy.py [--levels 1,2,4,8] [--runs 3]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from tests.support.timed_server import running  # noqa: E402

PROMPT, OUTPUT, PREFILL, DECODE = 1000, 80, 2000.0, 50.0
KINDS = {"usage_end": "openai", "role_chunk": "openai", "no_usage": "vllm"}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--levels", default="1,2,4,8")
    parser.add_argument("--runs", default="3")
    args = parser.parse_args()
    ttft = PROMPT / PREFILL
    print(
        f"server set to: TTFT {ttft * 1000:.1f} ms ({PROMPT} tokens at {PREFILL:g} tok/s), "
        f"decode {DECODE:g} tok/s, {OUTPUT} tokens per reply"
    )
    print(
        f"{'variant':<11} {'conc':>4} {'TTFT ms':>8} {'err ms':>7} {'prefill':>8} {'err %':>6} "
        f"{'decode':>7} {'err %':>6} {'total dec':>9} {'CPU ms/req':>10}"
    )
    with tempfile.TemporaryDirectory() as data:
        env = {
            **os.environ,
            "SPARKDECK_DATA_DIR": data,
            "SPARKDECK_CONFIG_DIR": data,
            "SPARKDECK_SCOPE": "bench-accuracy",
        }
        for variant, kind in KINDS.items():
            with running(variant, PREFILL, DECODE) as url:
                before = resource.getrusage(resource.RUSAGE_CHILDREN)
                done = subprocess.run(
                    [
                        sys.executable,
                        "-m",
                        "sparkdeck",
                        "bench",
                        "--json",
                        "--endpoint",
                        url,
                        "--kind",
                        kind,
                        "--concurrency",
                        args.levels,
                        "--runs",
                        args.runs,
                        "--prompt-tokens",
                        str(PROMPT),
                        "--output-tokens",
                        str(OUTPUT),
                    ],
                    capture_output=True,
                    text=True,
                    env=env,
                    cwd=REPO,
                )
                after = resource.getrusage(resource.RUSAGE_CHILDREN)
            if done.returncode != 0:
                raise SystemExit(done.stderr)
            run = json.loads(done.stdout)
            requests = sum(p["requests"] for p in run["points"]) + 1  # + warm-up
            cpu = after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime
            for p in run["points"]:
                print(
                    f"{variant:<11} {p['concurrency']:>4} {p['ttft_s'] * 1000:>8.2f} "
                    f"{(p['ttft_s'] - ttft) * 1000:>+7.2f} {p['prefill_tps']:>8.1f} "
                    f"{100 * (p['prefill_tps'] / PREFILL - 1):>+6.2f} {p['decode_tps']:>7.3f} "
                    f"{100 * (p['decode_tps'] / DECODE - 1):>+6.2f} "
                    f"{p['total_decode_tps']:>9.1f} {1000 * cpu / requests:>10.1f}"
                )
    print(f"load average at the end: {os.getloadavg()[0]:.2f} on {os.cpu_count()} CPUs")


if __name__ == "__main__":
    main()
