"""How far the chat pane lags behind a fast engine, and how fast it answers keys meanwhile.

A local SSE server (its own process, like a real engine) streams a Markdown reply at a fixed
rate (500, 2,000 and 5,000 tok/s, one token per SSE event) into the real ChatPane, which runs
headless at 120x40 in this process with saving on, as a user's would. Two figures per rate:

- lag: from the moment the server wrote the last token to the first screen update whose
  terminal output holds it. Headless Textual computes each compositor update but skips
  writing it; the benchmark turns every update into the terminal's escape sequence, as a real
  terminal run does (that cost is part of the figure), and looks for the last token's text
  in it: "on screen" means the bytes a terminal would be sent contain it (both clocks are
  CLOCK_MONOTONIC via perf_counter);
- key response: every 100 ms while the reply streams, a key press is posted to the app from
  another thread (as the terminal driver does) and timed from when it was due until the
  first screen update after the prompt input took it (a driver thread, like this one, may
  first wait for the interpreter lock: that wait counts). Median, p95 and max are printed.

Also printed: how many times the pane drained the reply's feed (drains) and the mean time a
drain took (feed ms), how many Markdown segments the reply was streamed in (segs), and the
CPU this process used per second of the run (cpu: 1.00 is one core; on a machine whose cores
are busy with other work the lag figures grow, this one much less) and the part of it the UI
thread used (ui): the rest is the HTTP/SSE worker thread, which shares the interpreter lock.

Run: .venv/bin/python benchmarks/chat_pane_lag.py [--seconds S] [--rates 500,2000,5000]
[--repeat N] [--default-gc]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing as mp
import os
import resource
import statistics
import tempfile
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

MARKER = "END-OF-REPLY"


def _tokens(count: int) -> list[str]:
    """Markdown-shaped text: paragraphs, a list and bold words, one token per event."""
    words = [
        "the",
        "engine",
        "streams",
        "**fast**",
        "tokens",
        "into",
        "a",
        "pane",
        "while",
        "memory",
        "stays",
        "`calm`",
        "and",
        "users",
        "read",
    ]
    out = []
    for i in range(count - 1):
        if i % 97 == 96:
            out.append("\n\n- ")
        elif i % 41 == 40:
            out.append("\n\n")
        else:
            out.append(" " + words[i % len(words)])
    out.append(" " + MARKER)
    return out


def _event(text: str) -> bytes:
    chunk = {
        "object": "chat.completion.chunk",
        "choices": [{"index": 0, "delta": {"content": text}, "finish_reason": None}],
    }
    return f"data: {json.dumps(chunk)}\n\n".encode()


def serve(port_out: Any, sent_out: Any, rate: float, count: int) -> None:
    """The engine stand-in: paces one token per event at `rate` tokens a second."""
    events = [_event(t) for t in _tokens(count)]

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args: Any) -> None:
            pass

        def do_GET(self) -> None:
            body = json.dumps({"data": [{"id": "bench-model"}]}).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_POST(self) -> None:
            self.rfile.read(int(self.headers.get("Content-Length", 0)))
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Connection", "close")
            self.end_headers()
            self.close_connection = True
            start = time.perf_counter()
            first = last = start
            for i, event in enumerate(events):
                delay = start + i / rate - time.perf_counter()
                if delay > 0:
                    time.sleep(delay)
                self.wfile.write(event)
                self.wfile.flush()
                last = time.perf_counter()
                if i == 0:
                    first = last
            self.wfile.write(b"data: [DONE]\n\n")
            self.wfile.flush()
            sent_out.put({"first": first, "last": last, "count": len(events)})

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    port_out.put(server.server_address[1])
    server.serve_forever()


async def measure(rate: float, seconds: float, tuned_gc: bool = True) -> dict[str, Any]:
    from textual import events
    from textual._compositor import CompositorUpdate
    from textual.app import App, ComposeResult
    from textual.widgets import Input, Markdown

    from sparkdeck.engines import get_kind
    from sparkdeck.ui import STYLESHEET, gc_tuning
    from sparkdeck.ui.chat.pane import ChatPane
    from sparkdeck.ui.chat.views import ReplyView

    count = int(rate * seconds)
    ports, sent = mp.Queue(), mp.Queue()
    proc = mp.Process(target=serve, args=(ports, sent, rate, count), daemon=True)
    proc.start()
    url = f"http://127.0.0.1:{ports.get(timeout=30)}"
    shown: dict[str, float] = {}
    keys: list[float] = []
    pending_key: list[float] = []
    drains = [0]
    feed_times: list[float] = []

    class Host(App):
        CSS_PATH = STYLESHEET

        def compose(self) -> ComposeResult:
            yield ChatPane(url, get_kind("openai"))

        def on_input_changed(self, event: Input.Changed) -> None:
            if event.input.id == "chat-input" and pending_key:
                answered.append(pending_key.pop(0))  # oldest first: keys arrive in order

        def _display(self, screen: Any, renderable: Any) -> None:
            super()._display(screen, renderable)
            if not isinstance(renderable, CompositorUpdate) or self._batch_count:
                return
            # what a terminal would be sent (headless Textual skips this step)
            sequence = renderable.render_segments(self.console)
            now = time.perf_counter()
            while answered:
                keys.append(now - answered.pop())
            if "painted" not in shown and MARKER in sequence:
                shown["painted"] = now

    answered: list[float] = []
    app = Host()
    cpu_before, wall_before = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter()
    ui_before = time.thread_time()  # this (the main) thread is the app's UI thread
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.pause()
        if tuned_gc:  # as `sparkdeck` does once its first frame is up
            gc_tuning.freeze_startup_objects()
        original_feed = ReplyView.feed

        async def counting_feed(view: ReplyView, *parts: Any) -> None:
            drains[0] += 1
            started = time.perf_counter()
            await original_feed(view, *parts)
            feed_times.append(time.perf_counter() - started)

        ReplyView.feed = counting_feed  # type: ignore[method-assign]
        appends = [0, 0.0]
        original_append = Markdown.append

        def timed_append(markdown: Markdown, fragment: str) -> Any:
            # every Markdown of the reply (a long reply is streamed in segments)
            started = time.perf_counter()
            done = original_append(markdown, fragment)

            async def wait_and_mark() -> None:
                await done
                appends[0] += 1
                appends[1] += time.perf_counter() - started
                if MARKER in fragment:
                    shown["appended"] = time.perf_counter()

            return wait_and_mark()

        Markdown.append = timed_append  # type: ignore[method-assign]
        stop_keys = threading.Event()

        def press_keys() -> None:  # as the terminal driver thread would
            # Presses are due every 100 ms and timed from when they were due: a driver
            # thread waits for the GIL like this one, and that wait is part of the answer.
            due = time.perf_counter() + 0.1
            while not stop_keys.wait(max(0.0, due - time.perf_counter())):
                while due <= time.perf_counter():  # woken late: the tty kept every press
                    pending_key.append(due)
                    app.post_message(events.Key("x", "x"))
                    due += 0.1

        prompt = app.query_one("#chat-input", Input)
        prompt.value = "stream please"
        # not pilot.press: it waits for the app to be idle, i.e. for much of the stream
        await prompt.action_submit()
        presser = threading.Thread(target=press_keys, daemon=True)
        presser.start()  # keys from the first token on
        while "painted" not in shown:
            await asyncio.sleep(0.01)  # not pilot.pause: that waits for idle, costing CPU
        stop_keys.set()
        presser.join()
        await pilot.pause(0.3)  # let the last posted key be handled before the app exits
        while app.query_one(ChatPane).streaming:
            await pilot.pause(0.01)
        view = list(app.query(ReplyView))[-1]
        caption = str(view.caption.render())
        chars = len(view.content_text)
        segments = view.segments
        Markdown.append = original_append  # type: ignore[method-assign]
        ReplyView.feed = original_feed  # type: ignore[method-assign]
    cpu_after, wall = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter() - wall_before
    ui_cpu = time.thread_time() - ui_before
    cpu = (cpu_after.ru_utime + cpu_after.ru_stime) - (cpu_before.ru_utime + cpu_before.ru_stime)
    server_side = sent.get(timeout=30)
    proc.terminate()
    achieved = (server_side["count"] - 1) / (server_side["last"] - server_side["first"])
    return {
        "rate": rate,
        "achieved": achieved,
        "tokens": server_side["count"],
        "lag_ms": (shown["painted"] - server_side["last"]) * 1000,
        "append_lag_ms": (shown["appended"] - server_side["last"]) * 1000,
        "keys": keys,
        "drains": drains[0],
        "chars": chars,
        "caption": caption,
        "segments": segments,
        "cpu_share": cpu / wall,
        "ui_share": ui_cpu / wall,
        "feed_ms": 1000 * sum(feed_times) / max(1, len(feed_times)),
        "appends": appends[0],
        "append_ms": 1000 * appends[1] / max(1, appends[0]),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=3.0, help="stream length per rate")
    parser.add_argument("--rates", default="500,2000,5000", help="tokens per second, comma list")
    parser.add_argument(
        "--repeat",
        type=int,
        default=3,
        help="runs per rate (a shared machine is noisy: medians are printed)",
    )
    parser.add_argument(
        "--default-gc",
        action="store_true",
        help="keep CPython's collector settings (sparkdeck tunes them: "
        "sparkdeck/ui/gc_tuning.py), to compare",
    )
    args = parser.parse_args()
    if not args.default_gc:
        from sparkdeck.ui import gc_tuning

        gc_tuning.tune_for_ui()
    os.environ["SPARKDECK_DATA_DIR"] = tempfile.mkdtemp(prefix="sparkdeck-bench-")
    print(
        f"chat pane lag benchmark: {args.seconds:g} s per rate, 120x40 headless, "
        f"{os.cpu_count()} CPUs, load {os.getloadavg()[0]:.2f}, "
        f"{'default' if args.default_gc else 'tuned'} garbage collector"
    )
    print(
        f"{'rate':>6} {'achieved':>9} {'tokens':>7} {'lag ms':>7} {'keys':>5} "
        f"{'key p50':>8} {'key p95':>8} {'key max':>8} {'drains':>7} {'feed ms':>7} "
        f"{'segs':>4} {'cpu':>5} {'ui':>5}  pane caption"
    )
    summary = []
    for rate in (float(r) for r in args.rates.split(",")):
        lags, key_p50s = [], []
        for _ in range(args.repeat):
            r = asyncio.run(measure(rate, args.seconds, tuned_gc=not args.default_gc))
            keys = sorted(k * 1000 for k in r["keys"])
            p50 = statistics.median(keys) if keys else float("nan")
            p95 = keys[min(len(keys) - 1, int(0.95 * len(keys)))] if keys else float("nan")
            worst = keys[-1] if keys else float("nan")
            lags.append(r["lag_ms"])
            key_p50s.append(p50)
            print(
                f"{r['rate']:>6.0f} {r['achieved']:>9.0f} {r['tokens']:>7} "
                f"{r['lag_ms']:>7.1f} {len(keys):>5} {p50:>8.1f} {p95:>8.1f} {worst:>8.1f} "
                f"{r['drains']:>7} {r['feed_ms']:>7.1f} {r['segments']:>4} "
                f"{r['cpu_share']:>5.2f} {r['ui_share']:>5.2f}  {r['caption']}",
                flush=True,
            )
        summary.append((rate, statistics.median(lags), statistics.median(key_p50s)))
    print(f"medians over {args.repeat} run(s), load now {os.getloadavg()[0]:.2f}:")
    for rate, lag, key in summary:
        print(f"  {rate:>6.0f} tok/s: lag {lag:.1f} ms, key response p50 {key:.1f} ms")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
