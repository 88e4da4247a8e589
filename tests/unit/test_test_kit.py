"""The test kit's own rules, read from the test modules' source (AST, not text: an
`asyncio.run` inside a child process's script is a string and is left alone).

No test module imports another: what tests share lives in tests/support, so the modules can
move between directories (unit, integration) without breaking each other's imports. No test
module runs its own event loop with asyncio.run: async tests are `async def` on anyio's
pytest plugin (tests/support/anyio_backend.py), one way for the whole suite.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]
MODULES = sorted(p for p in TESTS.rglob("test_*.py") if "support" not in p.parts)
TEST_MODULE = re.compile(r"^(tests\.)?([\w.]+\.)?test_\w+$")


def _imported_test_modules(tree: ast.Module) -> list[str]:
    found = []
    for node in ast.walk(tree):  # nested imports inside a test count too
        if isinstance(node, ast.Import):
            found += [a.name for a in node.names if TEST_MODULE.match(a.name)]
        elif isinstance(node, ast.ImportFrom):
            module = "." * node.level + (node.module or "")
            if TEST_MODULE.match(module.lstrip(".")):
                found.append(module)
            elif module.lstrip(".") in ("tests", ""):  # from tests import test_x
                found += [a.name for a in node.names if a.name.startswith("test_")]
    return found


def _asyncio_runs(tree: ast.Module) -> list[int]:
    aliases = {"asyncio.run"}
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module == "asyncio":
            aliases |= {a.asname or a.name for a in node.names if a.name == "run"}
    return [
        node.lineno
        for node in ast.walk(tree)
        if isinstance(node, ast.Call) and ast.unparse(node.func) in aliases
    ]


def test_the_rules_see_the_whole_suite():
    assert len(MODULES) > 100, [str(p) for p in MODULES]


def test_no_test_module_imports_another():
    offenders = {
        str(path.relative_to(TESTS)): found
        for path in MODULES
        if (found := _imported_test_modules(ast.parse(path.read_text())))
    }
    assert offenders == {}, f"share it through tests/support instead: {offenders}"


def test_no_test_module_runs_its_own_event_loop():
    offenders = {
        str(path.relative_to(TESTS)): lines
        for path in MODULES
        if (lines := _asyncio_runs(ast.parse(path.read_text())))
    }
    assert offenders == {}, f"make the test async with @pytest.mark.anyio: {offenders}"
