"""A bounded real memory hog: a child process that allocates and touches `size` bytes when
told to, holds them, and frees them (or is killed) after; for the guard's real-memory tests."""

from __future__ import annotations

import subprocess
import sys

HOG = r"""
import sys
size = int(sys.argv[1])
sys.stdin.readline()
block = bytearray(size)
for i in range(0, size, 4096):  # touch every page: calloc'd pages are not resident yet
    block[i] = 1
print("holding", flush=True)
sys.stdin.readline()
"""


class MemoryHog:
    def __init__(self, size: int):
        self.size = size
        self.child = subprocess.Popen([sys.executable, "-c", HOG, str(size)], text=True,
                                      stdin=subprocess.PIPE, stdout=subprocess.PIPE)

    def allocate(self) -> None:
        assert self.child.stdin is not None and self.child.stdout is not None
        self.child.stdin.write("go\n")
        self.child.stdin.flush()
        assert self.child.stdout.readline().strip() == "holding"

    def close(self) -> None:
        self.child.kill()
        self.child.wait(timeout=10)

    def __enter__(self) -> MemoryHog:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
