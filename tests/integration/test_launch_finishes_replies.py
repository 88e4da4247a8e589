"""A launch from the CLI lets the replies the endpoint streams from the running engine finish
before it stops that engine (a switch never cuts a reply off), within [endpoint]
finish_replies_s (real service, real Docker, real HTTP on loopback).

The engine is a busybox "engine" that streams a chat reply one token every 0.2 s (busybox nc
runs a shell script per connection): a reply in flight for seconds, which the tiny
llama-server would finish in milliseconds. What a broken launch gets wrong here: it stops the
engine mid-reply (the client's stream ends without [DONE]), or waits past its bound.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path

import httpx
import pytest

from sparkdeck.runtime.state import PRESET, SCOPE
from tests.conftest import busybox_preset, free_port
from tests.support.busybox_engines import web
from tests.support.cli import run_cli, wait_for
from tests.support.service_env import service_env  # noqa: F401 - a fixture

pytestmark = pytest.mark.docker

# One HTTP exchange on stdin/stdout: /health and /v1/models answer at once; anything else
# reads the request's body and gets a chat completion streamed one token every 0.2 s.
SLOW_ENGINE = r"""#!/bin/sh
cr=$(printf '\r')
read -r method path version
length=0
while read -r line; do
  line=${line%"$cr"}
  [ -z "$line" ] && break
  case "$line" in
    [Cc]ontent-[Ll]ength:*) length=${line#*: } ;;
  esac
done
[ "$length" -gt 0 ] && busybox head -c "$length" > /dev/null
if [ "$path" = "/health" ]; then
  printf 'HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok'
  exit 0
fi
if [ "$path" = "/v1/models" ]; then
  models='{"object":"list","data":[{"id":"slow","object":"model"}]}'
  printf 'HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n'
  printf 'Content-Length: %s\r\nConnection: close\r\n\r\n%s' ${#models} "$models"
  exit 0
fi
printf 'HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nConnection: close\r\n\r\n'
i=0
while [ $i -lt TOKENS ]; do
  printf 'data: {"choices":[{"index":0,"delta":{"content":"t%s "}}]}\n\n' $i
  sleep 0.2
  i=$((i+1))
done
printf 'data: {"choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}\n\n'
printf 'data: [DONE]\n\n'
"""


def _slow_engine(config: Path, script_dir: Path, image: str, tokens: int) -> None:
    """The slow engine's preset, written into `config`'s presets."""
    script_dir.mkdir()
    script = script_dir / "reply.sh"
    script.write_text(SLOW_ENGINE.replace("TOKENS", str(tokens)))
    script.chmod(0o755)
    busybox_preset(
        config,
        "slow",
        image,
        # sh stays PID 1 with a TERM trap (PID 1 ignores a signal it has no handler for):
        # a stop ends the server and the replies it is streaming, as an engine's does
        "trap 'kill 0' TERM; busybox nc -ll -p 8080 -e /srv/reply.sh & wait",
        health_path="/health",
        startup_timeout=30.0,
        volumes=[f"{script_dir}:/srv:ro"],
    )


def _stream(url: str, into: list[tuple[float, str]]) -> None:
    body = {"messages": [{"role": "user", "content": "hi"}], "stream": True}
    try:
        with httpx.stream("POST", url + "/v1/chat/completions", json=body, timeout=60) as answer:
            into.append((time.monotonic(), f"status {answer.status_code}"))
            for line in answer.iter_lines():
                if line.startswith("data:"):
                    into.append((time.monotonic(), line))
    except httpx.HTTPError as exc:  # the stream cut off: what a broken launch does
        into.append((time.monotonic(), f"error {type(exc).__name__}"))


def _switch_mid_reply(
    tmp_path: Path, env: dict, busybox_image: str, tokens: int, finish_replies_s: float
) -> tuple[list[tuple[float, str]], str, float]:
    """Launch the slow engine, start a streamed request through the endpoint, and launch
    another preset from the CLI once its first token came: (the stream's lines with their
    times, the CLI's output, when the CLI launch began)."""
    config = Path(env["SPARKDECK_CONFIG_DIR"])
    config.mkdir(parents=True, exist_ok=True)
    (config / "settings.toml").write_text(f"[endpoint]\nfinish_replies_s = {finish_replies_s}\n")
    _slow_engine(config, tmp_path / "slow-engine", busybox_image, tokens)
    web(config, busybox_image)
    launched = run_cli("launch", "slow", env=env, timeout=120)
    assert launched.returncode == 0, launched.stdout + launched.stderr
    url = f"http://127.0.0.1:{env['SPARKDECK_ENDPOINT_PORT']}"
    wait_for(
        lambda: _answers(url),
        timeout=30,
        every=0.3,
        what="the endpoint streaming from the slow engine",
    )
    lines: list[tuple[float, str]] = []
    reader = threading.Thread(target=_stream, args=(url, lines), daemon=True)
    reader.start()
    wait_for(lambda: any('"t0 "' in line for _, line in lines), timeout=10, what="a first token")
    began = time.monotonic()
    switched = run_cli("launch", "web", "--yes", "--no-flush", env=env, timeout=120)
    reader.join(timeout=30)
    assert switched.returncode == 0, switched.stdout + switched.stderr
    return lines, switched.stdout + switched.stderr, began


def _answers(url: str) -> bool:
    """The endpoint begins a streamed reply from the slow engine (the rest is not read)."""
    body = {"messages": [{"role": "user", "content": "hi"}], "stream": True}
    try:
        with httpx.stream("POST", url + "/v1/chat/completions", json=body, timeout=10) as answer:
            return answer.status_code == 200
    except httpx.HTTPError:
        return False


@pytest.fixture
def env(service_env) -> dict:
    return {**service_env, "SPARKDECK_ENDPOINT_PORT": str(free_port())}


def test_a_cli_launch_lets_the_reply_in_flight_finish_before_the_stop(
    tmp_path, env, busybox_image, docker_client, scope
):
    lines, said, _ = _switch_mid_reply(tmp_path, env, busybox_image, 20, 60.0)
    texts = [line for _, line in lines]
    # every token and the end came: the stop waited for the reply
    tokens = [t for t in texts if '"content":"t' in t]
    assert len(tokens) == 20 and texts[-1] == "data: [DONE]", f"{texts[-2:]}\n{said}"
    assert "waiting for 1 reply through the endpoint to finish before the stop" in said, said
    assert "the endpoint's replies finished in" in said, said
    # the new engine runs; the slow one is gone
    running = {
        c.labels.get(PRESET)
        for c in docker_client.containers.list(filters={"label": f"{SCOPE}={scope}"})
    }
    assert running == {"web"}, running


def test_the_wait_for_replies_ends_at_finish_replies_s(tmp_path, env, busybox_image):
    # a reply of 60 tokens (12 s) against a 1 s bound: the launch goes on after 1 s, and
    # says it cut the reply off
    lines, said, began = _switch_mid_reply(tmp_path, env, busybox_image, 60, 1.0)
    assert "went on after 1." in said and "the stop cuts 1 reply off" in said, said
    texts = [line for _, line in lines]
    assert "data: [DONE]" not in texts, texts[-3:]
    # the stream ended well before the reply's own 12 s: at the bound plus the stop
    ended = lines[-1][0] - began
    assert ended < 8.0, f"the stream ended {ended:.1f} s after the launch began"
