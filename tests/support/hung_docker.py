"""A Docker socket that accepts connections and never answers (as a SIGSTOPped dockerd): every
call through it ends in a real read timeout.
"""

from __future__ import annotations

import shutil
import socket
import tempfile
from collections.abc import Iterator
from pathlib import Path

import docker
import pytest


@pytest.fixture
def hung_daemon(tmp_path: Path) -> Iterator[docker.DockerClient]:
    """A Docker socket that takes connections and never replies, as a SIGSTOPped dockerd
    does (the kernel accepts into the backlog): every call ends in a real read timeout."""
    path = Path(tempfile.mkdtemp(prefix="sdhung", dir="/tmp")) / "docker.sock"
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(str(path))
    server.listen(64)
    client = docker.DockerClient(base_url=f"unix://{path}", version="1.41", timeout=1)
    try:
        yield client
    finally:
        client.close()
        server.close()
        shutil.rmtree(path.parent, ignore_errors=True)
