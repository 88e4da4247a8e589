"""sparkdeck: a keyboard-driven control panel for inference engines on one NVIDIA DGX Spark."""

import sys as _sys

__version__ = "0.1.0"

# `import httpx` also imports httpx's own command-line client (httpx._main) whenever click,
# rich and pygments are installed, and here all three are (Textual brings rich and pygments,
# uvicorn brings click). That costs every sparkdeck process that speaks HTTP about 6 MiB and
# 200 modules it never uses - the long-running service most of all. A None entry makes that
# one optional import fail the way httpx expects when its CLI extra is absent; nothing else
# of httpx changes. setdefault: a process that loaded it already keeps it.
_sys.modules.setdefault("httpx._main", None)  # type: ignore[arg-type]
