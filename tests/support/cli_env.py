"""The environment for `sparkdeck` commands run against the real Docker daemon: the test's
scope and a fake Hugging Face token that must never be shown; what the commands started in
the scope is removed after the test.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from tests.conftest import remove_scope

SECRET = "hf_sparkdeck_test_secret_do_not_show"


@pytest.fixture
def cli_env(isolated_dirs, scope, docker_client) -> Iterator[dict[str, str]]:
    yield {**os.environ, "SPARKDECK_SCOPE": scope, "HF_TOKEN": SECRET}
    remove_scope(docker_client, scope)  # what the CLI started in this test goes with it
