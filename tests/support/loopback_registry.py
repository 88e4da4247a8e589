"""An image registry on loopback, so that the real Docker daemon really pulls an image here.

No registry is reachable from these machines, so without this no test could watch a pull
happen: the daemon's own progress stream, layer by layer, is what sparkdeck turns into a
progress bar. This server speaks the part of the Docker Registry HTTP API V2 a pull uses
(`GET /v2/`, manifests and blobs by GET and HEAD; docs.docker.com/registry/spec/api) and
serves one image: Debian's static busybox plus a padding file, so the layer is big enough for
the daemon to report its download in several steps. It sends the blobs in pieces with
`pause` seconds between them, the way a real download takes its time. Docker treats
127.0.0.0/8 as an insecure registry by default, so the pull goes over plain HTTP.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import os
import tarfile
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

MANIFEST = "application/vnd.docker.distribution.manifest.v2+json"
CHUNK = 256 * 1024


def _sha(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def busybox_image_blobs(busybox: Path, padding: int) -> tuple[bytes, dict[str, bytes]]:
    """(manifest, {digest: blob}) of an image whose command is busybox httpd on /www."""
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w") as tar:
        for name in ("bin", "tmp", "www"):
            info = tarfile.TarInfo(name)
            info.type, info.mode = tarfile.DIRTYPE, 0o755
            tar.addfile(info)
        data = busybox.resolve().read_bytes()
        info = tarfile.TarInfo("bin/busybox")
        info.size, info.mode = len(data), 0o755
        tar.addfile(info, io.BytesIO(data))
        for applet in ("sh", "httpd"):
            link = tarfile.TarInfo(f"bin/{applet}")
            link.type, link.linkname = tarfile.SYMTYPE, "busybox"
            tar.addfile(link)
        for name, body in (("www/index.html", b"ok\n"), ("padding", os.urandom(padding))):
            info = tarfile.TarInfo(name)
            info.size, info.mode = len(body), 0o644
            tar.addfile(info, io.BytesIO(body))
    layer = gzip.compress(raw.getvalue(), compresslevel=1)
    config = json.dumps(
        {
            "architecture": "amd64",
            "os": "linux",
            "config": {"Cmd": ["/bin/httpd", "-f", "-p", "8080", "-h", "/www"]},
            "rootfs": {"type": "layers", "diff_ids": [_sha(raw.getvalue())]},
        }
    ).encode()
    manifest = json.dumps(
        {
            "schemaVersion": 2,
            "mediaType": MANIFEST,
            "config": {
                "mediaType": "application/vnd.docker.container.image.v1+json",
                "size": len(config),
                "digest": _sha(config),
            },
            "layers": [
                {
                    "mediaType": "application/vnd.docker.image.rootfs.diff.tar.gzip",
                    "size": len(layer),
                    "digest": _sha(layer),
                }
            ],
        }
    ).encode()
    return manifest, {_sha(config): config, _sha(layer): layer}


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: LoopbackRegistry

    def log_message(self, *args: Any) -> None:
        pass

    def do_HEAD(self) -> None:
        self._answer(send_body=False)

    def do_GET(self) -> None:
        self._answer(send_body=True)

    def _answer(self, send_body: bool) -> None:
        registry, path = self.server, self.path.split("?", 1)[0]
        self.server.requests.append(f"{self.command} {path}")
        prefix = f"/v2/{registry.repository}/"
        if path in ("/v2/", "/v2"):
            body, kind = b"{}", "application/json"
        elif (
            path == f"{prefix}manifests/{registry.tag}"
            or path == f"{prefix}manifests/{_sha(registry.manifest)}"
        ):
            body, kind = registry.manifest, MANIFEST
        elif path.startswith(f"{prefix}blobs/") and path[len(prefix) + 6 :] in registry.blobs:
            body, kind = registry.blobs[path[len(prefix) + 6 :]], "application/octet-stream"
        else:
            body = json.dumps({"errors": [{"code": "NAME_UNKNOWN", "message": path}]}).encode()
            self.send_response(404)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            if send_body:
                self.wfile.write(body)
            return
        self.send_response(200)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Docker-Content-Digest", _sha(body))
        self.send_header("Docker-Distribution-API-Version", "registry/2.0")
        self.end_headers()
        if not send_body:
            return
        for start in range(0, len(body), CHUNK):
            self.wfile.write(body[start : start + CHUNK])
            self.wfile.flush()
            if registry.pause and len(body) > CHUNK:
                time.sleep(registry.pause)


class LoopbackRegistry(ThreadingHTTPServer):
    """`with LoopbackRegistry(busybox) as registry:` pull `registry.reference`."""

    daemon_threads = True

    def __init__(
        self,
        busybox: Path,
        *,
        padding: int = 6 * 2**20,
        pause: float = 0.05,
        repository: str = "sparkdeck-test/pulled",
        tag: str = "1",
    ) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.repository, self.tag, self.pause = repository, tag, pause
        self.manifest, self.blobs = busybox_image_blobs(busybox, padding)
        self.requests: list[str] = []
        self._thread = threading.Thread(target=self.serve_forever, daemon=True)

    @property
    def reference(self) -> str:
        return f"127.0.0.1:{self.server_address[1]}/{self.repository}:{self.tag}"

    def __enter__(self) -> LoopbackRegistry:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.shutdown()
        self.server_close()
