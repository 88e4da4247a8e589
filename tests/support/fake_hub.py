"""A FAKE Hugging Face Hub: a loopback HTTP server that speaks the few routes huggingface_hub
uses to pull a model, so downloads are tested with the real library and no internet.

Routes (as the Hub answers them, headers included): GET /api/models/ORG/NAME[/revision/R]
with siblings and LFS sha256s; HEAD and GET /ORG/NAME/resolve/R/FILE with X-Repo-Commit,
X-Linked-Etag / X-Linked-Size for LFS files and Range requests. Errors carry the Hub's
X-Error-Code (GatedRepo, RepoNotFound, RevisionNotFound). Test knobs: drop a file's
connection after some bytes for its first GETs, serve a file slowly, or serve altered bytes
(a checksum mismatch). Every request is recorded with its Range header.
"""

from __future__ import annotations

import hashlib
import json
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import unquote, urlparse


@dataclass
class FakeRepo:
    files: dict[str, bytes]
    commit: str = "0123456789abcdef0123456789abcdef01234567"
    gated: bool = False
    private: bool = False
    lfs: tuple[str, ...] = ()  # files served as LFS (etag = sha256); others as git files


@dataclass
class FakeHub:
    repos: dict[str, FakeRepo] = field(default_factory=dict)
    token: str = "hf_fake_token"  # the one token this fake accepts
    drop_after: dict[str, tuple[int, int]] = field(default_factory=dict)  # file: (bytes, times)
    slow: dict[str, float] = field(default_factory=dict)  # file: seconds per 64 KiB chunk
    corrupt: set[str] = field(default_factory=set)
    requests: list[tuple[str, str, str | None]] = field(default_factory=list)
    url: str = ""
    _server: ThreadingHTTPServer | None = None

    def __enter__(self) -> FakeHub:
        hub = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:  # quiet
                pass

            def do_HEAD(self) -> None:
                hub._answer(self, head=True)

            def do_GET(self) -> None:
                hub._answer(self, head=False)

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc: object) -> None:
        assert self._server is not None
        self._server.shutdown()
        self._server.server_close()

    # ----- answering ------------------------------------------------------------------------

    def _error(self, h: BaseHTTPRequestHandler, status: int, code: str | None) -> None:
        h.send_response(status)
        if code:
            h.send_header("X-Error-Code", code)
        h.send_header("Content-Length", "0")
        h.end_headers()

    def _allowed(self, h: BaseHTTPRequestHandler, repo: FakeRepo, download: bool) -> bool:
        auth = h.headers.get("Authorization", "")
        good = auth == f"Bearer {self.token}"
        if repo.private and not good:
            self._error(h, 401, "RepoNotFound")
            return False
        if repo.gated and download and not good:
            self._error(h, 403 if auth else 401, "GatedRepo")
            return False
        return True

    def _answer(self, h: BaseHTTPRequestHandler, head: bool) -> None:
        path = unquote(urlparse(h.path).path)
        self.requests.append((h.command, path, h.headers.get("Range")))
        parts = path.strip("/").split("/")
        if parts[:2] == ["api", "models"] and len(parts) >= 4:
            self._info(h, "/".join(parts[2:4]), parts[5] if len(parts) > 5 else None)
        elif len(parts) >= 5 and parts[2] == "resolve":
            self._file(h, "/".join(parts[:2]), parts[3], "/".join(parts[4:]), head)
        else:
            self._error(h, 404, None)

    def _info(self, h: BaseHTTPRequestHandler, name: str, revision: str | None) -> None:
        repo = self.repos.get(name)
        if repo is None:
            return self._error(h, 401, "RepoNotFound")  # the Hub hides what may be private
        if not self._allowed(h, repo, download=False):
            return None
        if revision not in (None, "main", repo.commit):
            return self._error(h, 404, "RevisionNotFound")
        siblings = []
        for fname, data in repo.files.items():
            entry: dict[str, object] = {
                "rfilename": fname,
                "size": len(data),
                "blobId": hashlib.sha1(data).hexdigest(),
            }
            if fname in repo.lfs:
                entry["lfs"] = {
                    "sha256": hashlib.sha256(data).hexdigest(),
                    "size": len(data),
                    "pointerSize": 134,
                }
            siblings.append(entry)
        body = json.dumps(
            {
                "id": name,
                "modelId": name,
                "sha": repo.commit,
                "private": repo.private,
                "gated": "manual" if repo.gated else False,
                "siblings": siblings,
            }
        ).encode()
        h.send_response(200)
        h.send_header("Content-Type", "application/json")
        h.send_header("Content-Length", str(len(body)))
        h.end_headers()
        h.wfile.write(body)
        return None

    def _file(
        self, h: BaseHTTPRequestHandler, name: str, revision: str, fname: str, head: bool
    ) -> None:
        repo = self.repos.get(name)
        if repo is None:
            return self._error(h, 401, "RepoNotFound")
        if not self._allowed(h, repo, download=True):
            return None
        if revision not in ("main", repo.commit):
            return self._error(h, 404, "RevisionNotFound")
        if fname not in repo.files:
            return self._error(h, 404, "EntryNotFound")
        data = repo.files[fname]
        served = bytes(b ^ 0xFF for b in data) if fname in self.corrupt else data
        if fname in repo.lfs:
            etag = hashlib.sha256(data).hexdigest()
        else:
            etag = hashlib.sha1(data).hexdigest()
        start = 0
        wanted = h.headers.get("Range")
        if wanted and wanted.startswith("bytes="):
            start = int(wanted[6:].split("-")[0] or 0)
        h.send_response(206 if start else 200)
        h.send_header("X-Repo-Commit", repo.commit)
        h.send_header("ETag", f'"{etag}"')
        if fname in repo.lfs:
            h.send_header("X-Linked-Etag", f'"{etag}"')
            h.send_header("X-Linked-Size", str(len(data)))
        h.send_header("Accept-Ranges", "bytes")
        if start:
            h.send_header("Content-Range", f"bytes {start}-{len(data) - 1}/{len(data)}")
        h.send_header("Content-Length", str(len(data) - start))
        h.end_headers()
        if head:
            return None
        limit = len(served)
        drop = self.drop_after.get(fname)
        if drop and drop[1] > 0:
            self.drop_after[fname] = (drop[0], drop[1] - 1)
            limit = min(limit, drop[0])
        position = start
        while position < limit:
            end = min(position + 65536, limit)
            try:
                h.wfile.write(served[position:end])
                h.wfile.flush()
            except OSError:
                return None
            position = end
            if fname in self.slow:
                time.sleep(self.slow[fname])
        if limit < len(served):
            h.close_connection = True  # the server drops the connection mid-file
        return None

    def ranges(self, fname: str) -> list[str | None]:
        """Range headers of the GETs for `fname`, in order."""
        return [r for m, p, r in self.requests if m == "GET" and p.endswith("/" + fname)]
