"""The architecture, checked: the import contracts in pyproject.toml [tool.importlinter] hold
(readers and pure logic never import the UI or the CLI; the docker SDK only inside
sparkdeck.runtime), and no two top-level parts of sparkdeck import each other in a cycle.

Imports under `if TYPE_CHECKING:` are left out: they are annotations, never run.
tests/unit/test_layering.py checks the same layering from the other side, in a fresh interpreter
(Textual is not loaded by any core module).
"""

from __future__ import annotations

import tomllib
from collections import defaultdict
from pathlib import Path

import grimp
import pytest
from importlinter.cli import lint_imports

import sparkdeck

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = Path(sparkdeck.__file__).parent


def top_level_parts() -> set[str]:
    """sparkdeck's top-level modules and packages, as dotted names."""
    names = {f"sparkdeck.{p.stem}" for p in PACKAGE.glob("*.py") if p.stem != "__init__"}
    names |= {
        f"sparkdeck.{p.name}"
        for p in PACKAGE.iterdir()
        if p.is_dir() and (p / "__init__.py").is_file()
    }
    return names


def test_the_import_contracts_hold(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.chdir(ROOT)  # the contracts name modules; grimp finds them from here
    code = lint_imports(
        config_filename=str(ROOT / "pyproject.toml"), cache_dir=str(tmp_path), no_logo=True
    )
    assert code == 0, "an import contract is broken: run `lint-imports` for the chain"


def test_the_docker_contract_covers_every_part_but_the_runtime() -> None:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]
    (docker,) = [c for c in config["contracts"] if c["forbidden_modules"] == ["docker"]]
    assert set(docker["source_modules"]) == top_level_parts() - {"sparkdeck.runtime"}


def package_cycles() -> list[list[str]]:
    """Cycles among top-level parts (strongly connected groups of more than one)."""
    graph = grimp.build_graph("sparkdeck", exclude_type_checking_imports=True, cache_dir=None)
    parts = top_level_parts()

    def part(module: str) -> str | None:
        return next((p for p in parts if module == p or module.startswith(p + ".")), None)

    edges: dict[str, set[str]] = defaultdict(set)
    for module in graph.modules:
        source = part(module)
        for imported in graph.find_modules_directly_imported_by(module):
            target = part(imported)
            if source and target and source != target:
                edges[source].add(target)
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    cycles: list[list[str]] = []

    def connect(node: str) -> None:  # Tarjan's strongly connected components
        index[node] = low[node] = len(index)
        stack.append(node)
        for other in edges[node]:
            if other not in index:
                connect(other)
                low[node] = min(low[node], low[other])
            elif other in stack:
                low[node] = min(low[node], index[other])
        if low[node] == index[node]:
            group = []
            while True:
                member = stack.pop()
                group.append(member)
                if member == node:
                    break
            if len(group) > 1:
                cycles.append(sorted(group))

    for node in sorted(parts):
        if node not in index:
            connect(node)
    return cycles


def test_no_package_level_import_cycle() -> None:
    assert package_cycles() == []
