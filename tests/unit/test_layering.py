"""Textual is imported only under sparkdeck/ui: the core stays usable from scripts."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import sparkdeck

PACKAGE = Path(sparkdeck.__file__).parent
CORE_MODULES = sorted(
    ".".join(p.relative_to(PACKAGE.parent).with_suffix("").parts)
    for p in PACKAGE.rglob("*.py")
    if "ui" not in p.relative_to(PACKAGE).parts[:1] and p.name != "__main__.py"
)


def test_core_modules_exist():
    assert {
        "sparkdeck.cli.run",
        "sparkdeck.runtime.client",
        "sparkdeck.presets",
        "sparkdeck.engines.vllm",
    } <= set(CORE_MODULES)


def test_no_core_module_loads_textual():
    code = (
        "import importlib, sys\n"
        f"for name in {CORE_MODULES!r}:\n"
        "    importlib.import_module(name)\n"
        "    assert 'textual' not in sys.modules, name\n"
        "print('ok')\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0 and result.stdout.strip() == "ok", result.stderr


def test_no_core_source_mentions_textual_imports():
    offenders = [
        str(p)
        for p in PACKAGE.rglob("*.py")
        if "ui" not in p.relative_to(PACKAGE).parts
        and any(
            line.strip().startswith(("import textual", "from textual"))
            for line in p.read_text().splitlines()
        )
    ]
    assert offenders == []
