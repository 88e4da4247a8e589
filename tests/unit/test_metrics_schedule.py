"""`sparkdeck metrics --interval 1` against a /metrics page that hangs now and then.

vLLM's /metrics stalled for up to 9 s under load: the readings then came 9-15 s apart for 6
samples and rates were 5-20 % off. The loopback engine here counts 1,000 tokens a second and,
like a busy engine, reads its counter only when it gets round to answering: one request waits
0.5 s first (late, but answered); another sends its headers at once and then its page over
3 s, each piece inside the per-read timeout (given up at the scrape's own bound). Six samples
must still span five periods, every rate must be right, and the slow readings must say they
are late.
"""

from __future__ import annotations

import itertools
import json
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler

import pytest

from tests.support.metrics_loopback import serving_handler

RATE = 1000.0
WAIT_S = 0.5  # request 3: the engine answers after this (late, but answered)
TRICKLE_S = 3.0  # request 5: headers at once, then the page over this long (given up)


@contextmanager
def engine() -> Iterator[str]:
    """A loopback engine with vLLM-named series that reads its counter when it answers."""
    started = time.monotonic()
    numbers = itertools.count(1)
    lock = threading.Lock()

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            with lock:
                number = next(numbers)
            if number == 3:
                time.sleep(WAIT_S)
            tokens = RATE * (time.monotonic() - started)
            body = (
                "# HELP vllm:generation_tokens_total Generation tokens processed.\n"
                "# TYPE vllm:generation_tokens_total counter\n"
                f'vllm:generation_tokens_total{{model_name="m"}} {tokens:.3f}\n'
                "# HELP vllm:num_requests_running Requests running.\n"
                "# TYPE vllm:num_requests_running gauge\n"
                'vllm:num_requests_running{model_name="m"} 1.0\n'
            ).encode()
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; version=0.0.4")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            pieces = 6 if number == 5 else 1
            size = -(-len(body) // pieces)
            try:
                for i in range(pieces):
                    if i:
                        time.sleep(TRICKLE_S / pieces)  # each read well inside its timeout
                    self.wfile.write(body[i * size : (i + 1) * size])
                    self.wfile.flush()
            except OSError:
                pass  # the sampler gave up on this one and closed the connection

        def log_message(self, *args: object) -> None:
            pass

    with serving_handler(Handler) as url:
        yield url


def _metrics(url: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "sparkdeck",
            "metrics",
            "--endpoint",
            url,
            "--kind",
            "vllm",
            "--interval",
            "1",
            *args,
        ],
        capture_output=True,
        text=True,
        timeout=60,
        stdin=subprocess.DEVNULL,
    )


def test_six_samples_keep_their_schedule_and_rates_through_a_hanging_scrape():
    with engine() as url:
        done = _metrics(url, "--json", "--samples", "6")
    assert done.returncode == 0, done.stderr
    readings = [json.loads(line) for line in done.stdout.splitlines()]
    assert len(readings) == 6
    span = readings[-1]["wall"] - readings[0]["wall"]
    print(
        f"span {span:.2f} s; late {[r.get('late') for r in readings]}; "
        f"tok/s {[r['generation_tps'] for r in readings]}"
    )
    # five periods from the first reading to the last (the trickle would have added 3 s)
    assert span == pytest.approx(5.0, abs=0.6)
    assert [r["late"] for r in readings] == [False, False, True, False, True, False]
    assert readings[2]["status"] == "ok" and readings[2]["scrape_s"] >= WAIT_S
    assert readings[4]["status"] == "unreachable" and readings[4]["scrape_s"] is None
    assert "no answer within" in readings[4]["reason"]
    # every reading after the first, the given-up one aside, has the engine's rate
    for i in (1, 2, 3, 5):
        assert readings[i]["generation_tps"] == pytest.approx(RATE, rel=0.04), i


def test_text_output_marks_the_late_reading():
    with engine() as url:
        done = _metrics(url, "--samples", "3")
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert len(lines) == 3
    assert "late" not in lines[0] + lines[1]
    assert "[late: the engine took 0." in lines[2], lines[2]
