"""What a person sees: the dashboard at 120x40 with deterministic telemetry, in two themes.

Telemetry is fixed: Spark-shaped /proc text (a fake), NVML replays of the H200 recording and
of the GB10 fixture, five minutes of history built from them, one sample taken at start and
no more (sampling period of an hour). Docker answers with a fixed "unreachable" error so the
engine card does not depend on the machine. Regenerate with `--snapshot-update` after a
deliberate change, and look at the SVGs before committing them.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from textual.pilot import Pilot

from sparkdeck.docker_errors import DockerUnavailable
from sparkdeck.docker_runtime import DockerRuntime
from sparkdeck.presets import load_catalog
from sparkdeck.settings import Settings, UiSettings
from sparkdeck.ui.app import SparkdeckApp
from tests.support.telemetry import GB10, H200, replay_history, replay_sampler
from tests.test_ui_app import OLLAMA, TINY_LLAMA, text_of, wait_until, write_presets

SIZE = (120, 40)
HOUR = 3600.0


def no_docker() -> DockerRuntime:
    raise DockerUnavailable("cannot reach the Docker daemon (snapshot test)")


def dashboard(tmp_path: Path, recording: Path, sample: int, theme: str,
              rails: bool) -> SparkdeckApp:
    presets = write_presets(tmp_path / "presets", {"tiny-llama.toml": TINY_LLAMA,
                                                   "ollama-test.toml": OLLAMA})
    return SparkdeckApp(lambda: load_catalog([(presets, False)]), no_docker,
                        settings=Settings(ui=UiSettings(theme=theme)),
                        sampler=replay_sampler(recording, sample, rails=rails),
                        history=replay_history(recording), engine_poll_seconds=HOUR,
                        sample_seconds=HOUR, starting_sample_seconds=HOUR)


async def settled(pilot: Pilot) -> None:
    app = pilot.app
    await wait_until(pilot, lambda: app.query_one("#preset-table").row_count == 2,
                     what="the presets")
    await wait_until(pilot, lambda: "snapshot test" in text_of(app.query_one("#environment-panel")),
                     what="Docker's answer")
    await wait_until(pilot, lambda: "reading" not in text_of(app.query_one("#gpu-rows")),
                     what="the telemetry sample")
    # The preset table sizes its columns on idle after its rows arrive; a shot taken before
    # that shows cut columns (seen once in CI). Let the idle pass and any refresh run first.
    await pilot.wait_for_scheduled_animations()
    await pilot.pause(0.3)
    await pilot.pause()


@pytest.mark.parametrize(("recording", "sample", "theme", "rails"), [
    (H200, 15, "spark-dark", False),
    (GB10, 1, "spark-light", True),
], ids=["h200-load-spark-dark", "gb10-rails-spark-light"])
def test_dashboard(snap_compare, tmp_path: Path, recording: Path, sample: int, theme: str,
                   rails: bool) -> None:
    app = dashboard(tmp_path, recording, sample, theme, rails)
    assert snap_compare(app, terminal_size=SIZE, run_before=settled)
