"""A Hugging Face hub cache written the way `huggingface_hub` lays it out on disk.

models--ORG--NAME/blobs/<hash> holds each file once, snapshots/<commit>/<file> links to it,
refs/main names the commit. The library scanner is `huggingface_hub`'s own, so the layout
has to be the real one; the files in it are real (a config.json and safetensors weights).
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path


def add_to_cache(
    cache: Path, repo_id: str, files: dict[str, bytes], commit: str | None = None
) -> Path:
    """Put `files` into the cache as one revision of `repo_id`; returns the snapshot dir."""
    repo = cache / ("models--" + repo_id.replace("/", "--"))
    commit = commit or hashlib.sha1(repo_id.encode()).hexdigest()
    snapshot = repo / "snapshots" / commit
    (repo / "blobs").mkdir(parents=True, exist_ok=True)
    (repo / "refs").mkdir(exist_ok=True)
    snapshot.mkdir(parents=True, exist_ok=True)
    for name, data in files.items():
        blob = repo / "blobs" / hashlib.sha256(data).hexdigest()
        blob.write_bytes(data)
        link = snapshot / name
        link.parent.mkdir(parents=True, exist_ok=True)
        link.symlink_to(os.path.relpath(blob, link.parent))
    (repo / "refs" / "main").write_text(commit)
    return snapshot
