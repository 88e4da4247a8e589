"""A loopback OpenAI-style chat server whose timing the test sets, run in its own process.

It streams a reply on a planned schedule: the first content token `prompt_tokens /
prefill_rate` seconds after the request arrived, then one token every `1 / decode_rate`
seconds. Each chunk is sent at its planned time.perf_counter() deadline (sleep most of the
way, then spin the last fraction of a millisecond), so lateness never accumulates, and the
server logs when it really sent each one. perf_counter is CLOCK_MONOTONIC on Linux, shared
by every process, so a test can put the runner's readings next to the server's own.

It lives in a separate process so the client's threads never wait for this server's GIL.

Variants (the ways real engines differ that a benchmark must survive):
  usage_end  usage only in a final chunk with empty choices (include_usage), as vLLM does
  role_chunk a role-only chunk with empty content sent long before the first content
             token, then usage at the end
  no_usage   never any usage, even when asked; token counts come from /tokenize (vLLM-style)
  timings    as usage_end, plus a llama.cpp-style `timings` chunk with the server's own
             decode rate, (tokens - 1) / (last send - first send) on its own clock
  burst      as timings, but the tokens, generated on schedule, are held back and sent in
             one write at the end (a server, or a client, that fell behind)
  burst_histograms  as burst, without `timings`: the server's own figures are only in
             /metrics, vLLM's TTFT and inter-token latency histograms (every variant serves
             them: sums and counts of what was really generated)

Tokens are whitespace-separated words; the "chat template" adds TEMPLATE_TOKENS.
Run: python -m tests.support.timed_server --port P --variant V --prefill-rate R --decode-rate D
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import ThreadingHTTPServer
from pathlib import Path
from typing import Any

from tests.support.http_json import JsonReplies

TEMPLATE_TOKENS = 7
SPIN_S = 0.0003
MODEL = "timed-model"


def wait_until(deadline: float) -> None:
    remaining = deadline - time.perf_counter()
    if remaining > SPIN_S:
        time.sleep(remaining - SPIN_S)
    while time.perf_counter() < deadline:
        pass


def count_tokens(messages: list[dict[str, Any]]) -> int:
    return TEMPLATE_TOKENS + sum(len(str(m.get("content", "")).split()) for m in messages)


class TimedHandler(JsonReplies):
    protocol_version = "HTTP/1.1"
    server: TimedServer

    def parse_request(self) -> bool:
        # the request line has just been read: the earliest moment the request is here
        self.received_at = time.perf_counter()
        return super().parse_request()

    def log_message(self, format: str, *args: Any) -> None:  # keep test output clean
        pass

    def _body(self) -> dict[str, Any]:
        length = int(self.headers.get("Content-Length", "0"))
        return json.loads(self.rfile.read(length) or b"{}")

    def do_GET(self) -> None:  # noqa: N802 (the library's own name)
        if self.path == "/v1/models":
            self._json(200, {"object": "list", "data": [{"id": MODEL, "object": "model"}]})
        elif self.path == "/health":
            self._json(200, {})
        elif self.path == "/log":
            with self.server.lock:
                self._json(200, list(self.server.log))
        elif self.path == "/metrics":
            self._metrics()
        else:
            self._json(404, {"error": {"message": f"no {self.path}"}})

    def _metrics(self) -> None:
        """/metrics in vLLM's names: only the histograms' _sum and _count (what the
        benchmark's server-side figures read), for the requests served so far."""
        with self.server.lock:
            ttft, itl = (list(v) for v in self.server.histograms.values())
        lines = [
            "# TYPE vllm:time_to_first_token_seconds histogram",
            f'vllm:time_to_first_token_seconds_bucket{{le="+Inf"}} {ttft[1]}',
            f"vllm:time_to_first_token_seconds_sum {ttft[0]}",
            f"vllm:time_to_first_token_seconds_count {ttft[1]}",
            "# TYPE vllm:inter_token_latency_seconds histogram",
            f'vllm:inter_token_latency_seconds_bucket{{le="+Inf"}} {itl[1]}',
            f"vllm:inter_token_latency_seconds_sum {itl[0]}",
            f"vllm:inter_token_latency_seconds_count {itl[1]}",
            "",
        ]
        body = "\n".join(lines).encode()
        self.send_response(200)
        self.send_header("Content-Type", "text/plain; version=0.0.4")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_POST(self) -> None:  # noqa: N802 (the library's own name)
        received = self.received_at
        body = self._body()
        if self.path == "/tokenize" and self.server.variant == "no_usage":
            self._json(200, {"count": count_tokens(body.get("messages", [])), "tokens": []})
        elif self.path == "/v1/chat/completions":
            if body.get("stream"):
                self._stream(body, received)
            else:
                self._complete(body)
        else:
            self._json(404, {"error": {"message": f"no {self.path}"}})

    def _usage(self, prompt: int, completion: int) -> dict[str, int]:
        return {
            "prompt_tokens": prompt,
            "completion_tokens": completion,
            "total_tokens": prompt + completion,
        }

    def _complete(self, body: dict[str, Any]) -> None:
        prompt = count_tokens(body.get("messages", []))
        reply: dict[str, Any] = {
            "id": "x",
            "object": "chat.completion",
            "model": MODEL,
            "choices": [
                {
                    "index": 0,
                    "finish_reason": "length",
                    "message": {"role": "assistant", "content": "w"},
                }
            ],
        }
        if self.server.variant != "no_usage":
            reply["usage"] = self._usage(prompt, 1)
        self._json(200, reply)

    def _send(self, payload: Any) -> float:
        data = f"data: {payload if isinstance(payload, str) else json.dumps(payload)}\n\n"
        raw = data.encode()
        self.wfile.write(f"{len(raw):x}\r\n".encode() + raw + b"\r\n")
        self.wfile.flush()
        return time.perf_counter()

    def _chunk(self, delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
        return {
            "id": "x",
            "object": "chat.completion.chunk",
            "model": MODEL,
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
        }

    def _stream(self, body: dict[str, Any], received: float) -> None:
        srv = self.server
        prompt = count_tokens(body.get("messages", []))
        tokens = int(body.get("max_tokens") or 16)
        planned_first = received + prompt / srv.prefill_rate
        self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        if srv.variant == "role_chunk":
            # long before the first content: a client that starts TTFT here is far off
            self._send(self._chunk({"role": "assistant", "content": ""}))
        sent: list[float] = []
        held: list[dict[str, Any]] = []
        for i in range(tokens):
            wait_until(planned_first + i / srv.decode_rate)
            finish = "length" if i == tokens - 1 else None
            if srv.variant in ("burst", "burst_histograms"):
                held.append(self._chunk({"content": f" w{i}"}, finish))
                sent.append(time.perf_counter())  # generated now, sent below
            else:
                sent.append(self._send(self._chunk({"content": f" w{i}"}, finish)))
        if held:
            raw = "".join(f"data: {json.dumps(chunk)}\n\n" for chunk in held).encode()
            self.wfile.write(f"{len(raw):x}\r\n".encode() + raw + b"\r\n")
            self.wfile.flush()
        if srv.variant in ("timings", "burst") and tokens > 1:
            self._send(
                {
                    "id": "x",
                    "object": "chat.completion.chunk",
                    "model": MODEL,
                    "choices": [],
                    "timings": {
                        "predicted_n": tokens,
                        "prompt_n": prompt,
                        "predicted_per_second": (tokens - 1) / (sent[-1] - sent[0]),
                        "prompt_per_second": prompt / max(sent[0] - received, 1e-9),
                    },
                }
            )
        wants_usage = (body.get("stream_options") or {}).get("include_usage")
        if wants_usage and srv.variant != "no_usage":
            self._send(
                {
                    "id": "x",
                    "object": "chat.completion.chunk",
                    "model": MODEL,
                    "choices": [],
                    "usage": self._usage(prompt, tokens),
                }
            )
        self._send("[DONE]")
        self.wfile.write(b"0\r\n\r\n")
        self.wfile.flush()
        with srv.lock:
            # vLLM's latency histograms, as sums and counts of what was really generated
            srv.histograms["ttft"][0] += sent[0] - received
            srv.histograms["ttft"][1] += 1
            srv.histograms["itl"][0] += sent[-1] - sent[0]
            srv.histograms["itl"][1] += tokens - 1
            srv.log.append(
                {
                    "received": received,
                    "first_sent": sent[0],
                    "last_sent": sent[-1],
                    "planned_first": planned_first,
                    "planned_last": planned_first + (tokens - 1) / srv.decode_rate,
                    "prompt_tokens": prompt,
                    "tokens": tokens,
                }
            )


class TimedServer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, port: int, variant: str, prefill_rate: float, decode_rate: float):
        super().__init__(("127.0.0.1", port), TimedHandler)
        self.variant, self.prefill_rate, self.decode_rate = variant, prefill_rate, decode_rate
        self.lock = threading.Lock()
        self.log: list[dict[str, Any]] = []
        self.histograms = {"ttft": [0.0, 0], "itl": [0.0, 0]}  # [sum of seconds, count]

    def handle_error(self, request: Any, client_address: Any) -> None:
        pass  # clients that hang up (a cancelled benchmark) are expected here


@contextmanager
def running(variant: str, prefill_rate: float, decode_rate: float) -> Iterator[str]:
    """Start the server in a process of its own on a free port; yield its URL; stop it."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "tests.support.timed_server",
            "--port",
            str(port),
            "--variant",
            variant,
            "--prefill-rate",
            str(prefill_rate),
            "--decode-rate",
            str(decode_rate),
        ],
        cwd=Path(__file__).resolve().parents[2],
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 20
        while True:
            try:
                if urllib.request.urlopen(url + "/v1/models", timeout=1).status == 200:
                    break
            except OSError:
                if time.monotonic() > deadline or proc.poll() is not None:
                    raise AssertionError("the timed server did not start") from None
                time.sleep(0.05)
        yield url
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument(
        "--variant",
        required=True,
        choices=("usage_end", "role_chunk", "no_usage", "timings", "burst", "burst_histograms"),
    )
    parser.add_argument("--prefill-rate", type=float, required=True)
    parser.add_argument("--decode-rate", type=float, required=True)
    args = parser.parse_args()
    # Threads here wait for each other's GIL at most this long (default 5 ms), so a thread
    # that must send at its deadline is not held up by a sibling.
    sys.setswitchinterval(0.0002)
    try:
        # This process's schedule is the reference the test measures against; other work
        # on a small CI machine should delay it as little as possible (root only).
        os.nice(-10)
    except OSError:
        pass
    TimedServer(args.port, args.variant, args.prefill_rate, args.decode_rate).serve_forever()


if __name__ == "__main__":
    main()
