"""When a streamed reply's bytes arrive: a socket tap that stamps them off the wire.

The figures beside a reply (TTFT, tok/s) are only as good as the times its events are given.
The thread that parses, saves and shows a reply gets the CPU in bursts on a busy machine (the
TUI's worker shares the GIL with the screen), and events stamped there came out up to 19x too
fast. `tap(response, opened_at)` puts a thread of its own on the response's socket: it waits,
calls `recvmsg` and reads the clock, nothing else, and the HTTP parser (h11, on the consumer's
thread) is served from what it read. On Linux the kernel's receive stamp of the newest bytes
of each read is used, turned into perf_counter time, so even a reader that waited for the GIL
stamps bytes when they came in. Pieces read together share one stamp, the newest bytes' one.
"""

from __future__ import annotations

import os
import queue
import select
import socket
import struct
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

import httpcore
import httpx

# Bytes one recvmsg() of the tap may take: everything that queued while it waited.
_TAP_BYTES = 256 * 1024


class SocketTap:
    """Reads a response's socket on a thread of its own and serves the HTTP parser from it.

    That thread only waits, calls `recv` and reads the clock, so bytes are stamped within one
    GIL hand-over of their arrival however busy the parsing thread is: stamping where events
    were parsed, or reading through h11 one chunk at a time on a starved thread, put 6,000
    tokens at 3,000 tok/s up to 1.6 s late with a CPU hog beside the TUI. The connection's
    `read` is pointed at the tap while it lives (h11 then parses on the consumer's thread);
    `close()` stops the thread and gives the connection its own `read` back.
    """

    def __init__(self, network_stream: Any, sock: socket.socket, opened_at: float):
        self._stream, self._sock = network_stream, sock
        self._queue: queue.SimpleQueue[tuple[float, bytes | OSError]] = queue.SimpleQueue()
        self._held = b""
        self._ended: bytes | OSError | None = None  # b"" at EOF, or the reader's error
        self.arrived_at = opened_at  # when the bytes handed out last came off the socket
        self._wake_r, self._wake_w = os.pipe()
        network_stream.read = self._read  # an instance attribute: the class's stays as it is
        self._thread = threading.Thread(target=self._run, daemon=True, name="chat-stream-reader")
        self._thread.start()

    def _run(self) -> None:
        put, clock, sock = self._queue.put, time.perf_counter, self._sock
        poller = select.poll()  # not select(): a busy app may hold fds above 1024
        poller.register(sock, select.POLLIN)
        poller.register(self._wake_r, select.POLLIN)
        kernel = _kernel_stamps(sock)
        last = self.arrived_at
        try:
            while True:
                if any(fd == self._wake_r for fd, _ in poller.poll()):
                    return
                data, ancillary, _, _ = sock.recvmsg(_TAP_BYTES, _CMSG_SPACE)
                now = clock()
                # The kernel's receive stamp of the newest bytes read is earlier than `now`
                # by however long this thread waited for the GIL. It is used only when it
                # lies between the previous stamp and now: a packet that came before the
                # stamps were switched on carries another clock's time (TCP's own).
                at = now if kernel is None else kernel(ancillary, now)
                if not last <= at <= now:
                    at = now
                last = at
                put((at, data))
                if not data:
                    return
        except OSError as exc:  # a shut-down socket (cancel) or a reset
            put((clock(), exc))

    def _read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        if not self._held:
            if self._ended is not None:
                item: bytes | OSError = self._ended
            else:
                try:
                    self.arrived_at, item = self._queue.get(timeout=timeout)
                except queue.Empty:
                    raise httpcore.ReadTimeout(f"no data in {timeout} s") from None
                if isinstance(item, OSError) or not item:
                    self._ended = item
            if isinstance(item, OSError):
                raise httpcore.ReadError(str(item)) from item
            self._held = item
        data, self._held = self._held[:max_bytes], self._held[max_bytes:]
        return data

    def close(self) -> None:
        os.write(self._wake_w, b"x")
        self._thread.join(5.0)
        try:
            del self._stream.read
        except AttributeError:
            pass
        os.close(self._wake_r)
        os.close(self._wake_w)


_SO_TIMESTAMPNS = getattr(socket, "SO_TIMESTAMPNS", 35)  # Linux's value; Python lacks it
_CMSG_SPACE = socket.CMSG_SPACE(16)
_RCVBUF_BYTES = 4 * 2**20


def _kernel_stamps(sock: socket.socket) -> Callable[[list[Any], float], float] | None:
    """Linux stamps each received packet (CLOCK_REALTIME); this turns the stamp of a
    recvmsg()'s newest bytes into perf_counter time. None where the socket cannot."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        sock.setsockopt(socket.SOL_SOCKET, _SO_TIMESTAMPNS, 1)
    except OSError:
        return None
    try:
        # The stamp is the bytes' arrival in the receive queue: room there for a second or
        # so of a fast stream keeps a reader that waited for the GIL from holding the
        # server's sends back (the kernel caps this at net.core.rmem_max).
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, _RCVBUF_BYTES)
    except OSError:
        pass
    # realtime - perf_counter, from the closest-spaced of three readings
    _spread, offset = min(
        (b - a, w - (a + b) / 2)
        for a, w, b in ((time.perf_counter(), time.time(), time.perf_counter()) for _ in range(3))
    )

    def stamp(ancillary: list[Any], default: float) -> float:
        for level, kind, data in ancillary:
            if level == socket.SOL_SOCKET and kind == _SO_TIMESTAMPNS and len(data) >= 16:
                seconds, nanoseconds = struct.unpack("qq", data[:16])
                return seconds + nanoseconds * 1e-9 - offset
        return default

    return stamp


def tap(response: httpx.Response, opened_at: float) -> SocketTap | None:
    """A tap on a plain TCP response (TLS buffers inside the ssl object: not tapped)."""
    stream = response.extensions.get("network_stream")
    sock = stream.get_extra_info("socket") if stream is not None else None
    if type(sock) is not socket.socket or not callable(getattr(stream, "read", None)):
        return None
    return SocketTap(stream, sock, opened_at)
