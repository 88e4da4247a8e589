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


def _slot_in_thread(slot, alone: bool):
    """slot.acquire(alone) on a thread of its own (a worker of its own: flock holds are per
    open file, and each MachineSlot opens its own); the event is set once it holds."""
    import threading

    held = threading.Event()

    def take() -> None:
        slot.acquire(alone)
        held.set()

    thread = threading.Thread(target=take, daemon=True)
    thread.start()
    return held, thread


def test_the_alone_tests_take_the_machine_before_any_shared_test_starts(tmp_path, monkeypatch):
    """A worker whose first test is shared waits until the alone worker holds the machine,
    then until it lets go: a shared test that started first held every alone test up for
    its whole length (the vLLM bench's 20 s in CI runs 31-34)."""
    from tests.support.parallel_runs import COLLECTED, MachineSlot

    monkeypatch.setenv("PYTEST_XDIST_WORKER_COUNT", "2")
    for worker in ("gw0", "gw1"):  # both have collected
        (tmp_path / (COLLECTED + worker)).touch()
    shared, alone = MachineSlot(tmp_path, alone_in_run=True), MachineSlot(tmp_path, True)
    held, thread = _slot_in_thread(shared, alone=False)
    assert not held.wait(0.5), "a shared test took the machine before the alone tests"
    alone.acquire(True)  # the alone worker arrives later, and still goes first
    assert not held.wait(0.5), "a shared test ran beside an alone one"
    alone.after(next_alone=False)
    assert held.wait(5), "the shared test never got the machine after the alone ones"
    thread.join(5)
    shared.release()


def test_a_run_without_an_alone_first_test_is_not_held_up(tmp_path, monkeypatch):
    """No alone tests in the run, or every worker began with a shared one: shared tests
    start at once."""
    from tests.support.parallel_runs import MachineSlot

    monkeypatch.setenv("PYTEST_XDIST_WORKER_COUNT", "2")
    first = MachineSlot(tmp_path, alone_in_run=False)
    held, thread = _slot_in_thread(first, alone=False)
    assert held.wait(1), "held up with no alone test in the run"
    thread.join(5)
    first.release()
    # the run has alone tests, but both workers began with shared ones: the first waits
    # until the second has begun, then both go
    directory = tmp_path / "run"
    directory.mkdir()
    monkeypatch.setenv("PYTEST_XDIST_WORKER", "gw0")
    gw0, _ = _slot_in_thread(MachineSlot(directory, alone_in_run=True), alone=False)
    assert not gw0.wait(0.3), "went before it knew whether another worker began alone"
    monkeypatch.setenv("PYTEST_XDIST_WORKER", "gw1")
    gw1, _ = _slot_in_thread(MachineSlot(directory, alone_in_run=True), alone=False)
    assert gw1.wait(1) and gw0.wait(1), "held up though no worker began with an alone test"
