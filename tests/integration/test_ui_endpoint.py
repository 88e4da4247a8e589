"""The connect screen (`a`) and its requests tab, driven by Pilot.

The connect tab is checked against a real service process (its socket, its OpenAI endpoint
on a free loopback port, with an API key in the environment: the screen must say the
endpoint answers, which it only does when the key went into the request, and the key's
value must appear nowhere on the screen, in the snippets or in what `c` copies). No engine
is needed: the endpoint lists every preset's model without one. The requests tab reads a
log written by the real RequestLog with fixed rows, and picks up a new row within its
stated refresh (3 s).
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from textual.widgets import DataTable, Static, TabbedContent, TextArea

from sparkdeck.endpoint.request_log import RequestLog, RequestRecord
from sparkdeck.ui.endpoint import requests as requests_view
from sparkdeck.ui.endpoint.view import ConnectScreen
from sparkdeck.ui.screens.dialogs import HelpScreen
from tests.conftest import free_port, llama_preset_fields, write_preset
from tests.support.cli import run_cli
from tests.support.offline_app import make_app, text_of
from tests.support.pane_host import wait_until
from tests.support.service_teardown import Pinned, stop_service

SECRET = "s3cret-connect-value-7f3a"
KEY_ENV = "SPARKDECK_API_KEY"


def screen_text(app) -> str:
    """Everything drawn now, as the terminal would show it (the SVG export holds the text)."""
    return app.export_screenshot()


@pytest.fixture
def service_with_key(isolated_dirs, monkeypatch: pytest.MonkeyPatch) -> Iterator[dict]:
    """A real service whose endpoint requires SECRET; the same environment in this process
    (the TUI reads the port and the key where it runs, as a user's shell would give it)."""
    port = free_port()
    write_preset(
        isolated_dirs["config"] / "presets",
        "connect-tiny",
        **llama_preset_fields(
            "sparkdeck-test/never-pulled:1", free_port(), model="connect-model-x"
        ),
    )
    monkeypatch.setenv("SPARKDECK_ENDPOINT_PORT", str(port))
    monkeypatch.setenv(KEY_ENV, SECRET)
    env = {**os.environ, "SPARKDECK_SERVICE": "auto"}
    started = run_cli("service", "start", env=env)
    assert started.returncode == 0, started.stderr
    pid = int(started.stdout.split("process ")[1].rstrip(")\n"))
    service = Pinned(pid)
    yield {"port": port, "pid": pid, "env": env}
    stop_service(env, service)


@pytest.mark.anyio
async def test_connect_screen_shows_url_models_snippets_and_never_the_key(
    service_with_key, tmp_path: Path
) -> None:
    port, pid = service_with_key["port"], service_with_key["pid"]
    base = f"http://127.0.0.1:{port}/v1"
    app, _ = make_app(tmp_path)

    async def scenario() -> None:
        async with app.run_test(size=(80, 24)) as pilot:
            await pilot.press("a")
            await wait_until(pilot, lambda: isinstance(app.screen, ConnectScreen))
            screen = app.screen
            await wait_until(
                pilot,
                lambda: screen.info is not None and len(screen.snippet_texts()) == 4,
                timeout=20,
            )
            summary = screen.summary
            assert f"base URL  {base}" in summary
            # the service's own pid, and the endpoint answered /v1/models with the key
            assert f"service running (process {pid}); endpoint answering" in summary, summary
            assert "connect-model-x" in summary and "(preset connect-tiny)" in summary
            assert "preset files" not in summary  # the names came from the endpoint
            assert f"the value of ${KEY_ENV}" in summary
            curl, openai_py, webui, ssh = screen.snippet_texts()
            assert f"curl {base}/chat/completions" in curl
            assert f'Authorization: Bearer ${KEY_ENV}"' in curl
            assert f'OpenAI(base_url="{base}", api_key=os.environ["{KEY_ENV}"])' in openai_py
            assert f"URL  {base}" in webui and f"${KEY_ENV}" in webui
            assert ssh.startswith(f"ssh -L {port}:127.0.0.1:{port} ")
            # the snippets name a model the endpoint lists (the first: none runs)
            assert f'"model": "{screen.info.models[0].id}"' in curl
            assert SECRET not in summary + "".join(screen.snippet_texts())
            assert SECRET not in screen_text(app)
            # c on a focused snippet copies it whole (still no key value)
            screen.query_one("#connect-snippet-1", TextArea).focus()
            await pilot.press("c")
            assert app.clipboard == openai_py and SECRET not in app.clipboard
            await pilot.press("2")
            await wait_until(
                pilot, lambda: screen.query_one(TabbedContent).active == "requests-pane"
            )
            assert SECRET not in screen_text(app)
            await pilot.press("escape")
            assert not isinstance(app.screen, ConnectScreen)
            await pilot.press("question_mark")
            await wait_until(pilot, lambda: isinstance(app.screen, HelpScreen))
            rows = [" ".join(map(str, row)) for row in app.screen.rows]
            assert any(row.startswith("a ") and "Connect" in row for row in rows), rows
            assert any("in the connect screen: Copy" in row for row in rows), rows

    await scenario()


@pytest.mark.anyio
async def test_with_no_service_the_screen_says_so_and_names_models_from_the_presets(
    isolated_dirs, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    port = free_port()  # nothing listens there
    monkeypatch.setenv("SPARKDECK_ENDPOINT_PORT", str(port))
    monkeypatch.delenv(KEY_ENV, raising=False)
    app, _ = make_app(tmp_path)

    async def scenario() -> None:
        async with app.run_test(size=(80, 24)) as pilot:
            await pilot.press("a")
            await wait_until(
                pilot,
                lambda: isinstance(app.screen, ConnectScreen) and app.screen.info is not None,
                timeout=20,
            )
            summary = app.screen.summary
            assert "service not running" in summary and "endpoint not answering" in summary
            assert "model names from the preset files" in summary
            assert "none (set $SPARKDECK_API_KEY" in summary
            curl, openai_py, _, _ = app.screen.snippet_texts()
            assert "Authorization" not in curl and 'api_key="none"' in openai_py
            assert f"http://127.0.0.1:{port}/v1" in curl

    await scenario()


def record(when: float, model: str, status: int = 200, **fields) -> RequestRecord:
    return RequestRecord(
        when, "127.0.0.1:40100", "/v1/chat/completions", model, status, True, **fields
    )


def table_rows(table: DataTable) -> list[list[str]]:
    return [[str(cell) for cell in table.get_row_at(i)] for i in range(table.row_count)]


@pytest.mark.anyio
async def test_requests_tab_lists_the_log_newest_first_and_follows_it(
    isolated_dirs, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SPARKDECK_ENDPOINT_PORT", str(free_port()))
    log = RequestLog()  # the data dir's, where the service writes it
    now = time.time()
    log.append(
        record(
            now - 120,
            "old-model",
            prompt_tokens=12,
            output_tokens=40,
            tokens_from="usage",
            ttft_s=0.0874,
            decode_tps=61.25,
            duration_s=0.8,
        )
    )
    log.append(
        record(
            now - 60,
            "switched-model",
            prompt_tokens=7,
            output_tokens=20,
            ttft_s=1.5,
            decode_tps=30.0,
            waited_s=12.34,
        )
    )
    log.append(
        record(now - 30, "missing-model", status=404, error="model 'missing-model' is not served")
    )
    reads = []
    real_read = RequestLog.read

    def counted(self, since=None):
        reads.append(time.monotonic())
        return real_read(self, since)

    monkeypatch.setattr(RequestLog, "read", counted)
    app, _ = make_app(tmp_path)

    async def scenario() -> None:
        async with app.run_test(size=(80, 24)) as pilot:
            await pilot.press("a")
            await wait_until(pilot, lambda: isinstance(app.screen, ConnectScreen))
            await pilot.press("2")
            table = app.screen.query_one("#requests-table", DataTable)
            await wait_until(pilot, lambda: table.row_count == 3)
            labels = [column.label.plain for column in table.columns.values()]
            # 80 columns: the six first columns at least, in their order
            assert labels[:6] == ["time", "model", "status", "out", "TTFT ms", "tok/s"]
            rows = table_rows(table)
            assert [row[1] for row in rows] == ["missing-model", "switched-model", "old-model"]
            assert rows[0][2:6] == ["404", "-", "-", "-"]
            assert rows[2][2:6] == ["200", "40", "87", "61.2"]
            assert rows[1][labels.index("waited s")] == "12.3"
            assert rows[2][labels.index("waited s")] == "-"
            status = text_of(app.screen.query_one("#requests-status", Static))
            assert status.startswith("3 requests in ") and "newest first" in status
            # an unchanged log is not parsed again (only stat'ed)
            first_reads = len(reads)
            await pilot.pause(requests_view.REFRESH_S * 2 + 0.5)
            assert len(reads) == first_reads, reads
            # a new request appears within the refresh period (3 s), at the top
            log.append(record(time.time(), "new-model", output_tokens=5, ttft_s=0.01))
            appended = time.monotonic()
            await wait_until(
                pilot,
                lambda: table.row_count == 4 and str(table.get_row_at(0)[1]) == "new-model",
                timeout=requests_view.REFRESH_S + 1.5,
            )
            assert time.monotonic() - appended <= requests_view.REFRESH_S + 1.5

    async def wide() -> None:
        app, _ = make_app(tmp_path)
        async with app.run_test(size=(200, 30)) as pilot:
            await pilot.press("a")
            await wait_until(pilot, lambda: isinstance(app.screen, ConnectScreen))
            await pilot.press("2")
            table = app.screen.query_one("#requests-table", DataTable)
            await wait_until(pilot, lambda: table.row_count == 4)
            labels = [column.label.plain for column in table.columns.values()]
            assert labels == list(requests_view.LABELS)  # all of them at 200 columns
            error = table_rows(table)[1][labels.index("error")]
            assert error == "model 'missing-model' is not served"

    await scenario()
    await wide()
