"""A failed launch says why (issue 27, item 1): a real llama-server given an argument it does
not know exits at once with `error: invalid argument: ...`. That line, escaped, is on the
TUI's engine card, in `sparkdeck status` and in `sparkdeck logs --last-failure` until
`sparkdeck dismiss`; `r` reads a failure recorded since by another process.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator

import pytest

from sparkdeck.catalog import load_catalog
from sparkdeck.launch.failure import last_failure, record_failure
from sparkdeck.runtime.client import DockerRuntime
from sparkdeck.ui.app import SparkdeckApp
from tests.conftest import free_port, llama_preset_fields, remove_scope, write_preset
from tests.support.cli import run_cli as shared_run_cli
from tests.support.offline_app import engine_text
from tests.support.pane_host import wait_until

pytestmark = [pytest.mark.docker, pytest.mark.llama]
# ESC [ 2 J clears a terminal: llama-server echoes the argument back, sparkdeck must not obey it
BAD_ARG = "--no-such-flag\x1b[2J"
SHOWN = "invalid argument: --no-such-flag\u241b[2J"


def run_cli(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return shared_run_cli(*args, env=env, timeout=180)  # a failing launch's own wait first


@pytest.fixture
def cli_env(isolated_dirs, scope, docker_client) -> Iterator[dict[str, str]]:
    yield {**os.environ, "SPARKDECK_SCOPE": scope}
    remove_scope(docker_client, scope)


@pytest.mark.anyio
async def test_a_failed_launch_shows_the_engines_last_lines_until_dismissed(
    cli_env, isolated_dirs, scope, docker_client, llama_image
):
    write_preset(
        isolated_dirs["config"] / "presets",
        "bad-arg",
        **llama_preset_fields(llama_image, free_port(), args=[BAD_ARG]),
    )
    launched = run_cli("launch", "bad-arg", "--no-flush", "--yes", env=cli_env)
    assert launched.returncode == 1, launched.stdout + launched.stderr

    status = run_cli("status", env=cli_env)
    assert status.returncode == 0, status.stderr
    assert "last launch failed: bad-arg" in status.stdout
    assert SHOWN in status.stdout and "\x1b" not in status.stdout

    logs = run_cli("logs", "--last-failure", env=cli_env)
    assert logs.returncode == 0, logs.stderr
    assert SHOWN in logs.stdout and "\x1b" not in logs.stdout
    # the container is gone (a failed launch leaves none): plain `logs` points there
    plain = run_cli("logs", env=cli_env)
    assert plain.returncode == 1 and "--last-failure" in plain.stderr

    runtime = DockerRuntime(
        docker_client, scope=scope, files_dir=isolated_dirs["data"] / "launch-files"
    )
    app = SparkdeckApp(
        lambda: load_catalog([(isolated_dirs["config"] / "presets", False)]),
        lambda: runtime,
        flush=False,
        engine_poll_seconds=0.5,
    )

    async def scenario() -> None:
        async with app.run_test(size=(120, 40)) as pilot:
            await wait_until(
                pilot,
                lambda: "invalid argument" in engine_text(app),
                timeout=60.0,
                what="the engine's own line on the card",
            )
            card = engine_text(app)
            assert "--no-such-flag\u241b[2J" in card and "\x1b" not in card
            # another process records a newer failure: `r` shows it, not the old one
            record_failure("bad-arg", "a newer failure", 1, ["error: the newer reason"])
            await pilot.press("r")
            await wait_until(
                pilot,
                lambda: "the newer reason" in engine_text(app),
                what="the newer failure after r",
            )
            assert "invalid argument" not in engine_text(app)

    await scenario()

    assert run_cli("dismiss", env=cli_env).returncode == 0
    assert last_failure() is None
    after = run_cli("status", env=cli_env)
    assert "last launch failed" not in after.stdout and "newer reason" not in after.stdout
    gone = run_cli("logs", "--last-failure", env=cli_env)
    assert gone.returncode == 1 and "no failed launch on record" in gone.stderr
