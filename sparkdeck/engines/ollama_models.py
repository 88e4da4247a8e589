"""Ollama's model store over its HTTP API: is the preset's model there, and pulling it.

An Ollama container starts empty (or with what its volume kept); a chat with a model it does
not hold fails with "model not found". So a launch asks `POST /api/show` once the server is
up and, on a 404, pulls with `POST /api/pull`, whose streamed answer is one JSON object per
line: `{"status": "pulling <digest>", "digest": ..., "total": N, "completed": M}` per blob,
then "verifying sha256 digest", "writing manifest", "success"; or `{"error": "..."}`. Each
line becomes a PullProgress (the same events as an image pull, so the CLI and the engine card
show one progress bar for both).
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable

import httpx

from sparkdeck.http_limits import capped_client
from sparkdeck.runtime.errors import ModelPullError
from sparkdeck.runtime.pull import PullProgress
from sparkdeck.text_safety import excerpt

SHOW_TIMEOUT_S = 30.0
# Connect and per-read limits of a pull: a large blob may go quiet while Ollama verifies it.
PULL_TIMEOUT = httpx.Timeout(10.0, read=600.0)
PULL_ANSWER_LIMIT = 256 * 1024 * 1024


def _error_text(response: httpx.Response) -> str:
    """Ollama's own error message (cleaned and cut short: it is the server's text)."""
    try:
        text = str(response.json().get("error") or response.text)
    except (ValueError, AttributeError, RecursionError):
        text = response.text
    return excerpt(text, 300) or f"HTTP {response.status_code}"


def model_present(base_url: str, model: str) -> bool:
    """True when the Ollama server at `base_url` already holds `model`."""
    try:
        with capped_client(timeout=SHOW_TIMEOUT_S) as http:  # a ceiling on the answer
            response = http.post(f"{base_url}/api/show", json={"model": model})
    except httpx.HTTPError as exc:
        raise ModelPullError(f"cannot ask Ollama at {base_url} for {model}: {exc}") from exc
    if response.status_code == 200:
        return True
    if response.status_code == 404:
        return False
    raise ModelPullError(
        f"Ollama answered /api/show for {model} with HTTP "
        f"{response.status_code}: {_error_text(response)}"
    )


def progress_of(model: str, line: dict[str, object]) -> PullProgress:
    """One line of /api/pull as a progress event (raises on an error line)."""
    if "error" in line:
        raise ModelPullError(f"Ollama could not pull {model}: {excerpt(str(line['error']), 300)}")
    digest = line.get("digest")
    total, completed = line.get("total"), line.get("completed")
    return PullProgress(
        model,
        excerpt(str(digest), 100) if digest else None,
        excerpt(str(line.get("status", "")), 100),
        completed if isinstance(completed, int) else None,
        total if isinstance(total, int) else None,
    )


def pull_model(
    base_url: str,
    model: str,
    on_progress: Callable[[PullProgress], object],
    cancel: threading.Event | None = None,
) -> None:
    """Pull `model` into the server, reporting each step; raises ModelPullError when Ollama
    says no or the stream ends without "success", and stops (closing the stream) on cancel."""
    done = False
    try:
        # a pull's progress is a few MB of JSON lines even for the largest model: the
        # ceiling only stops a server that never ends a line or the stream
        with (
            capped_client(PULL_ANSWER_LIMIT, timeout=PULL_TIMEOUT) as http,
            http.stream(
                "POST", f"{base_url}/api/pull", json={"model": model, "stream": True}
            ) as response,
        ):
            if response.status_code != 200:
                response.read()
                raise ModelPullError(
                    f"Ollama refused to pull {model} (HTTP "
                    f"{response.status_code}): {_error_text(response)}"
                )
            for text in response.iter_lines():
                if cancel is not None and cancel.is_set():
                    raise ModelPullError(f"pull of {model} cancelled")
                if not text.strip():
                    continue
                try:
                    line = json.loads(text)
                except (ValueError, RecursionError):
                    raise ModelPullError(
                        f"Ollama's pull answer for {model} is not JSON "
                        f"lines: {excerpt(text, 200)!r}"
                    ) from None
                if not isinstance(line, dict):
                    continue
                event = progress_of(model, line)
                on_progress(event)
                done = done or event.status == "success"
    except httpx.HTTPError as exc:
        raise ModelPullError(
            f"pulling {model} from Ollama at {base_url} failed: {excerpt(str(exc), 300)}"
        ) from exc
    if not done:
        raise ModelPullError(f'Ollama\'s pull of {model} ended without "success"')
