"""Which Hugging Face repo a preset's `model` names, and which of its files an engine loads.

A launch pulls the preset's model into the hub cache before the engine starts
(sparkdeck.launch.model_step); these are the pure parts of that: telling a repo id from a
path, and choosing the files. Engines that load a whole snapshot (vLLM, SGLang, TensorRT-LLM)
take every file. llama-server's `-hf REPO[:TAG]` loads one GGUF (all its splits) and picks it
by rules of its own, followed here as llama.cpp build b11434 has them
(common/download.cpp: find_best_model, gguf_filename_is_model, get_split_files), so that
sparkdeck fetches the file the server will then find in the cache, not the whole repo of
quantisations.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path

# File names that are not models in a GGUF repo: projectors, importance matrices, drafts.
_NOT_MODELS = ("mmproj", "imatrix", "mtp-", "eagle3-", "dflash-", "dspark-")
_SPLIT = re.compile(r"^(.+)-([0-9]{5})-of-([0-9]{5})$", re.IGNORECASE)
_DEFAULT_TAGS = ("Q4_K_M", "Q8_0")  # llama.cpp's choice when the preset names no tag


def repo_and_tag(model: str) -> tuple[str, str] | None:
    """(repo id, tag) when `model` names a Hub repo ('org/name' or 'org/name:Q8_0' as
    llama-server's -hf takes it); None for a .gguf path, a local directory or anything
    else that is not a repo id."""
    if not model or model.endswith(".gguf") or model.startswith(("/", ".", "~")):
        return None
    repo, _, tag = model.partition(":")
    if repo.count("/") != 1 or not all(repo.split("/")) or Path(model).expanduser().is_dir():
        return None
    if not re.fullmatch(r"[\w.-]+/[\w.-]+", repo) or ".." in repo:
        return None
    return repo, tag


def _is_model(name: str) -> bool:
    base = name.rsplit("/", 1)[-1]
    return name.endswith(".gguf") and not any(word in base for word in _NOT_MODELS)


def _split(name: str) -> tuple[str, int, int]:
    """(prefix, index, count) of a GGUF file name; a file in one piece is 1 of 1."""
    prefix = name[: -len(".gguf")]
    m = _SPLIT.match(prefix)
    return (m.group(1), int(m.group(2)), int(m.group(3))) if m else (prefix, 1, 1)


def llama_cpp_files(names: Sequence[str], tag: str) -> list[str]:
    """The GGUF files llama-server's -hf loads from a repo listing `names` (in the Hub's
    order): the first model file matching the tag (else Q4_K_M, then Q8_0, then the first
    model file), with every split of it. Empty when none matches a tag that was given."""
    tags = [tag] if tag else list(_DEFAULT_TAGS)
    primary = None
    for wanted in tags:
        pattern = re.compile(re.escape(wanted) + r"[.-]", re.IGNORECASE)
        primary = next(
            (
                n
                for n in names
                if _is_model(n) and pattern.search(n) and (_split(n)[2] == 1 or _split(n)[1] == 1)
            ),
            None,
        )
        if primary:
            break
    if primary is None and not tag:
        primary = next(
            (n for n in names if _is_model(n) and (_split(n)[2] == 1 or _split(n)[1] == 1)), None
        )
    if primary is None:
        return []
    prefix, _, count = _split(primary)
    if count == 1:
        return [primary]
    return [
        n for n in names if n.endswith(".gguf") and _split(n)[0] == prefix and _split(n)[2] == count
    ]


def cached_snapshot(cache: Path, repo: str, ref: str = "main") -> Path | None:
    """The snapshot directory `refs/<ref>` names in the hub cache `cache`, when it holds
    files; read from the cache only (no Hub), as an engine started offline will look."""
    folder = cache / ("models--" + repo.replace("/", "--"))
    try:
        commit = (folder / "refs" / ref).read_text().strip()
        snapshot = folder / "snapshots" / commit
        return snapshot if commit and snapshot.is_dir() and any(snapshot.iterdir()) else None
    except OSError:
        return None


def bytes_on_disk(path: Path) -> int:
    """Bytes of a file, or of every file under a directory (a snapshot's links followed to
    their blobs, each blob counted once)."""
    if path.is_file():
        return path.stat().st_size
    seen: dict[Path, int] = {}
    for item in path.rglob("*"):
        try:
            if item.is_file():
                real = item.resolve()
                seen[real] = real.stat().st_size
        except OSError:
            continue
    return sum(seen.values())
