"""The event loop of the suite's async tests: anyio's pytest plugin runs each test marked
`pytest.mark.anyio` on the backend this fixture names. asyncio only: Textual, httpx's
clients and the app's workers run on asyncio, and trio is not installed.
"""

from __future__ import annotations

import pytest


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"
