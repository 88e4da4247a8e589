"""One benchmark from choosing the engine to the stored record, for the CLI and the TUI alike.

`prepare()` does the blocking look-ups (which engine, which model, its version, the launch
fingerprint); `run()` records the run as started, runs it with the memory watchdog beside it,
stores each concurrency level as it finishes and the outcome at the end, and returns the
stored record. `cancel()` may be called from any thread and ends the run with a record.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from sparkdeck.bench.outcome import BenchConfig, BenchProgress, now_iso
from sparkdeck.bench.runner import BenchRunner
from sparkdeck.bench.store import BenchStore, StoredRun
from sparkdeck.bench.target import (
    LaunchFingerprint,
    NoBenchTarget,
    Watch,
    bench_target,
    fingerprint,
    read_engine_version,
)
from sparkdeck.chat.client import ChatClient, api_key_from_env
from sparkdeck.chat.errors import ChatError
from sparkdeck.endpoints import Endpoint
from sparkdeck.engines import get_kind
from sparkdeck.http_limits import capped_client


class BenchSession:
    """A benchmark of the engine at `url` (or the one sparkdeck runs, or the one attached)."""

    def __init__(
        self,
        config: BenchConfig,
        *,
        url: str | None = None,
        kind: str | None = None,
        store: BenchStore | None = None,
        on_progress: Callable[[BenchProgress], object] | None = None,
    ):
        self.config, self.url, self.kind = config, url, kind
        self.store = store or BenchStore()
        self.on_progress = on_progress
        self.api_key: str | None = None
        self.endpoint: Endpoint | None = None
        self.fingerprint: LaunchFingerprint | None = None
        self.runner: BenchRunner | None = None
        self._watch: Watch | None = None
        self._cancelled: str | None = None

    def prepare(self) -> LaunchFingerprint:
        """Find the engine and fingerprint its launch. Raises NoBenchTarget when the engine
        cannot be reached or names no model."""
        endpoint, managed, self._watch = bench_target(self.url, self.kind)
        # a key, for an engine that wants one, comes from the environment, never from a file
        self.api_key = api_key_from_env(get_kind(endpoint.kind).api_key_env)
        try:
            with ChatClient(endpoint.url, api_key=self.api_key) as client:
                model = self.config.model or client.default_model()
        except ChatError as exc:
            raise NoBenchTarget(f"cannot benchmark {endpoint.url}: {exc}") from None
        with capped_client(timeout=5.0) as http:  # every body read has a ceiling
            version = read_engine_version(endpoint, http)
        self.endpoint = endpoint
        self.fingerprint = fingerprint(endpoint, model, version, managed)
        self.runner = BenchRunner(
            endpoint.url,
            get_kind(endpoint.kind),
            replace(self.config, model=model),
            api_key=self.api_key,
            on_progress=self.on_progress,
        )
        if self._cancelled:
            self.runner.cancel(self._cancelled)
        return self.fingerprint

    def run(self) -> StoredRun:
        """Run (preparing first if needed) and return the stored record."""
        if self.runner is None:
            self.prepare()
        assert self.runner is not None and self.fingerprint is not None
        assert self._watch is not None
        runner, store = self.runner, self.store
        run_id = store.begin_run(self.fingerprint, runner.config, now_iso())
        runner.on_point = lambda point, rounds: store.add_point(run_id, point, rounds)
        with self._watch(runner):
            outcome = runner.run()
        store.finish_run(run_id, outcome)
        return store.run(run_id)

    def cancel(self, reason: str) -> None:
        """End the run from any thread; what was measured so far stays on record."""
        self._cancelled = reason
        if self.runner is not None:
            self.runner.cancel(reason)
