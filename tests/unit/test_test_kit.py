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


def test_free_ports_are_below_the_ephemeral_range_and_each_workers_own(monkeypatch):
    """No connect() is given a free_port() port as its source port (the kernel takes those
    from ip_local_port_range), no two workers draw the same one, and one in use is passed
    over."""
    import socket

    from tests import conftest

    ephemeral = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    drawn = {}
    for worker in ("gw0", "gw1", "gw2", "gw3"):
        monkeypatch.setenv("PYTEST_XDIST_WORKER", worker)
        monkeypatch.setattr(conftest, "_ports_drawn", 0)
        drawn[worker] = {conftest.free_port() for _ in range(50)}
        assert len(drawn[worker]) == 50 and max(drawn[worker]) < ephemeral
    assert not set.intersection(*drawn.values())
    monkeypatch.setenv("PYTEST_XDIST_WORKER", "gw1")
    monkeypatch.setattr(conftest, "_ports_drawn", 0)
    first = conftest.free_port()
    monkeypatch.setattr(conftest, "_ports_drawn", 0)
    with socket.socket() as held:  # another program listens on the next port
        held.bind(("127.0.0.1", first))
        held.listen()
        assert conftest.free_port() == first + 1
