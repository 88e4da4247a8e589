"""The model library: what models are on this machine, how big, and which presets use them.

Two places are read: the Hugging Face hub cache (with `huggingface_hub`'s own cache scanner,
so HF_HOME / HF_HUB_CACHE are honoured exactly as the engines' downloads honour them) and
GGUF files, both those in the directories given and those presets point at on this machine.
Each model's facts come from its files (sparkdeck.models.read); a model whose files cannot be
read is still listed, with the reason instead of facts.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sparkdeck.models.facts import ModelFacts
from sparkdeck.models.read import ModelUnreadable, read_gguf, read_hf_dir
from sparkdeck.text_safety import clean


@dataclass(frozen=True)
class LocalModel:
    """One model on disk: a cached Hub repo revision, or a GGUF file."""

    name: str  # the repo id, or the GGUF file's name
    origin: str  # "hf-cache" | "gguf"
    path: str  # the snapshot directory or the file
    revision: str | None  # the commit of the cached snapshot
    size_bytes: int  # on disk (a cached repo: every revision's blobs, as the scanner counts)
    last_used: float | None  # last access (the cache scanner's), else modification time
    facts: ModelFacts | None
    problem: str | None = None  # why the facts could not be read
    presets: tuple[str, ...] = ()  # ids of presets whose model this is

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "origin": self.origin,
            "path": self.path,
            "revision": self.revision,
            "size_bytes": self.size_bytes,
            "last_used": self.last_used,
            "presets": list(self.presets),
            "facts": self.facts.to_dict() if self.facts else None,
            "problem": self.problem,
        }


@dataclass(frozen=True)
class Library:
    models: tuple[LocalModel, ...]
    problems: tuple[str, ...] = field(default=())  # places that could not be read


def scan_hf_cache(cache_dir: Path | None = None) -> tuple[list[LocalModel], list[str]]:
    """Model repos in the hub cache (datasets and spaces are not models: skipped)."""
    from huggingface_hub import scan_cache_dir
    from huggingface_hub.errors import CacheNotFound

    try:
        info = scan_cache_dir(cache_dir or info_dir(None))  # the env now, not at import
    except CacheNotFound:
        return [], []  # no cache yet: nothing downloaded, not a problem
    except OSError as exc:
        return [], [f"Hugging Face cache: {exc}"]
    found = []
    for repo in info.repos:
        if repo.repo_type != "model" or not repo.revisions:
            continue
        revision = max(repo.revisions, key=lambda r: r.last_modified)
        try:
            facts, problem = read_hf_dir(Path(revision.snapshot_path)), None
        except ModelUnreadable as exc:
            facts, problem = None, str(exc)
        found.append(
            LocalModel(
                repo.repo_id,
                "hf-cache",
                str(revision.snapshot_path),
                revision.commit_hash,
                repo.size_on_disk,
                repo.last_accessed,
                facts,
                problem,
            )
        )
    problems = [f"Hugging Face cache: {w}" for w in info.warnings]
    return found, problems


def scan_gguf(files: Iterable[Path]) -> list[LocalModel]:
    found = []
    for path in sorted(set(files)):
        try:
            stat = path.stat()
        except OSError:
            continue
        try:
            facts, problem = read_gguf(path), None
        except ModelUnreadable as exc:
            facts, problem = None, str(exc)
        found.append(
            LocalModel(
                path.name,
                "gguf",
                str(path),
                None,
                stat.st_size,
                stat.st_atime or stat.st_mtime,
                facts,
                problem,
            )
        )
    return found


def gguf_files(dirs: Sequence[Path]) -> list[Path]:
    """Every .gguf under the given directories (one level of sub-directories deep, where
    llama.cpp users keep one folder per model)."""
    files: list[Path] = []
    for folder in dirs:
        if folder.is_dir():
            files += folder.glob("*.gguf")
            files += folder.glob("*/*.gguf")
    return files


def _users(model: LocalModel, preset_models: dict[str, str]) -> tuple[str, ...]:
    """Preset ids whose `model` names this one: the repo id, or the GGUF's path or name."""
    users = []
    for preset_id, named in preset_models.items():
        in_hub = model.origin == "hf-cache" and named == model.name
        a_gguf = model.origin == "gguf" and (named == model.path or Path(named).name == model.name)
        if in_hub or a_gguf:
            users.append(preset_id)
    return tuple(sorted(users))


def scan_library(
    *, preset_models: dict[str, str], gguf_dirs: Sequence[Path] = (), cache_dir: Path | None = None
) -> Library:
    """The whole library; `preset_models` maps preset ids to their `model` field."""
    models, problems = scan_hf_cache(cache_dir)
    preset_files = [Path(m) for m in preset_models.values() if m.endswith(".gguf")]
    models += scan_gguf([*gguf_files(gguf_dirs), *(p for p in preset_files if p.is_file())])
    models = [LocalModel(**{**m.__dict__, "presets": _users(m, preset_models)}) for m in models]
    models.sort(key=lambda m: (m.origin, m.name.lower()))
    return Library(tuple(models), tuple(problems))


@dataclass(frozen=True)
class Removal:
    """What `sparkdeck models rm` would delete: a cached repo's revisions, as
    huggingface_hub's scanner identifies them, and its delete strategy to run."""

    repo: str
    revisions: tuple[str, ...]
    freed_bytes: int
    strategy: Any  # huggingface_hub's DeleteCacheStrategy: .execute() deletes

    def execute(self) -> None:
        self.strategy.execute()


class NotInCache(LookupError):
    """The repo is not a model repo huggingface_hub's cache scanner knows."""


def plan_removal(repo_id: str, cache_dir: Path | None = None) -> Removal:
    """Every cached revision of `repo_id`; nothing the scanner does not identify is named."""
    from huggingface_hub import scan_cache_dir
    from huggingface_hub.errors import CacheNotFound

    try:
        info = scan_cache_dir(cache_dir or info_dir(None))  # the env now, not at import
    except (CacheNotFound, OSError) as exc:
        raise NotInCache(f"{repo_id}: no Hugging Face cache to remove it from ({exc})") from None
    for repo in info.repos:
        if repo.repo_type == "model" and repo.repo_id == repo_id:
            hashes = tuple(sorted(r.commit_hash for r in repo.revisions))
            strategy = info.delete_revisions(*hashes)
            return Removal(repo_id, hashes, strategy.expected_freed_size, strategy)
    raise NotInCache(f"{repo_id} is not in the Hugging Face cache at {info_dir(cache_dir)}")


def info_dir(cache_dir: Path | None) -> Path:
    from sparkdeck.models.plan import hub_cache_dir

    return cache_dir or hub_cache_dir()


def _params(count: int) -> str:
    for scale, unit in ((1e12, "T"), (1e9, "B"), (1e6, "M"), (1e3, "K")):
        if count >= scale:
            return f"{count / scale:.1f}{unit}"
    return str(count)


GIB = 2**30

COLUMNS = ("model", "format", "quant", "params", "size", "last used", "KV/token", "presets")
"""The library's columns, as `sparkdeck models` prints them and the TUI's models view shows."""


def row_cells(model: LocalModel) -> tuple[str, ...]:
    """One model as the library's row (names as written on disk, control characters shown
    as text: a file name may hold anything)."""
    facts = model.facts
    name = clean(model.name)  # a file name on disk may hold control characters
    used = time.strftime("%Y-%m-%d", time.localtime(model.last_used)) if model.last_used else "-"
    if facts is None:
        return (
            name,
            model.origin,
            "?",
            "?",
            f"{model.size_bytes / GIB:.1f} GiB",
            used,
            "?",
            ",".join(model.presets) or "-",
        )
    quant = facts.quantization or (facts.dtypes[0] if facts.dtypes else "?")
    params = _params(facts.parameters)
    if facts.is_moe:
        params += f" ({facts.experts_per_token}/{facts.experts} experts)"
    kv = f"{facts.kv_bytes_per_token() / 1024:.0f} KiB"
    return (
        name,
        facts.format,
        quant,
        params,
        f"{model.size_bytes / GIB:.1f} GiB",
        used,
        kv,
        ",".join(model.presets) or "-",
    )
