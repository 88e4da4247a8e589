"""Every skip in the suite goes through conftest's `unavailable()` (issue 12, item 14).

Under SPARKDECK_REQUIRE_REAL_PARTS=1 (.ci/run) a missing real part - root, cgroups, PSI,
NVML, a finite memlock - must fail the run, not skip silently. A bare `pytest.skip` is only
allowed where the test is about a host that CI's cannot be (e.g. one WITHOUT a GPU driver),
and then a comment right above it says "Not a missing part" and why.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests import conftest

TESTS = Path(__file__).parents[1]
BARE = re.compile(
    r"pytest\.skip\(|pytest\.mark\.skip(if)?\b|pytest\.importorskip\(|"
    r"\bimportorskip\("
)
EXPLAINED = "Not a missing part"


def _bare_skips() -> list[str]:
    found = []
    for path in sorted(TESTS.rglob("*.py")):
        if path.name == "test_skips_routed.py":
            continue
        lines = path.read_text(encoding="utf-8").splitlines()
        for number, line in enumerate(lines, 1):
            if not BARE.search(line) or line.lstrip().startswith("#"):
                continue
            if path.name == "conftest.py" and "def unavailable" in "\n".join(
                lines[max(number - 4, 0) : number]
            ):
                continue  # unavailable() itself: skips only when real parts are not required
            if any(EXPLAINED in above for above in lines[max(number - 4, 0) : number - 1]):
                continue
            found.append(f"{path.relative_to(TESTS)}:{number}: {line.strip()}")
    return found


def test_no_skip_bypasses_require_real_parts() -> None:
    assert _bare_skips() == []


def test_unavailable_fails_when_real_parts_are_required(monkeypatch) -> None:
    monkeypatch.setattr(conftest, "REQUIRE_REAL", True)
    with pytest.raises(pytest.fail.Exception, match="required real part missing: no PSI"):
        conftest.unavailable("no PSI")
    monkeypatch.setattr(conftest, "REQUIRE_REAL", False)
    with pytest.raises(pytest.skip.Exception):
        conftest.unavailable("no PSI")
