"""Downloading a model repo into the Hugging Face cache, with progress, through huggingface_hub.

sparkdeck writes no download code: the file list and sizes come from HfApi.model_info (with
files_metadata), each file from hf_hub_download, whose tqdm_class hook reports the bytes.
huggingface_hub resumes a file whose connection drops with a Range request inside one run;
across runs it resumes per file: completed files stay in the cache and are not fetched again,
but since huggingface_hub 2.x (its PR #4228) a partial file is deleted when its download
stops, so an interrupted file starts again from its first byte.
What sparkdeck adds: the size against free disk before anything is fetched, a plain message
naming HF_TOKEN for gated and private repos (the token is taken from the environment only and
never printed), and the sha256 of every LFS file checked against the Hub's before it is kept.
"""

from __future__ import annotations

import fnmatch
import hashlib
import io
import shutil
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from sparkdeck.models.hub_access import (
    ChecksumMismatch,
    NoSpace,
    PullCancelled,
    RepoNotFound,
    hub_endpoint,
    hub_token,
    translate,
)
from sparkdeck.models.plan import hub_cache_dir
from sparkdeck.text_safety import clean

GIB = 2**30


@dataclass(frozen=True)
class RemoteFile:
    name: str
    size: int
    sha256: str | None  # LFS files: the content's sha256 (also their etag); else None


@dataclass(frozen=True)
class PullPlan:
    """What a pull will fetch, checked against the disk before it starts."""

    repo: str
    commit: str
    files: tuple[RemoteFile, ...]
    cache_dir: Path
    total: int  # bytes of every file selected
    needed: int  # bytes still to fetch (complete blobs and partial files subtracted)
    free: int  # bytes free on the cache's filesystem
    ref: str | None = "main"  # the branch or tag whose refs/ file names `commit` afterwards


@dataclass(frozen=True)
class PullProgress:
    """One update: the file being fetched and the whole pull, in bytes."""

    file: str
    file_done: int
    file_total: int
    done: int
    total: int
    rate: float  # bytes per second fetched in this run (resumed bytes not counted)
    eta_s: float | None

    def describe(self) -> str:
        """The line the CLI redraws and the TUI's models view shows."""
        eta = f"{self.eta_s:.0f}s" if self.eta_s is not None else "?"
        return (
            f"{clean(self.file)}  {human_bytes(self.file_done)}/"
            f"{human_bytes(self.file_total)}  |  total {human_bytes(self.done)}/"
            f"{human_bytes(self.total)}  {human_bytes(self.rate)}/s  ETA {eta}"
        )


def human_bytes(n: float) -> str:
    for unit, scale in (("GiB", GIB), ("MiB", 2**20), ("KiB", 1024)):
        if n >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{n:.0f} B"


def free_bytes(path: Path) -> int:
    """Free bytes on the filesystem that holds `path` (or would, once created)."""
    probe = path
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    return shutil.disk_usage(probe).free


def _selected(name: str, include: Sequence[str]) -> bool:
    return not include or any(fnmatch.fnmatch(name, glob) for glob in include)


def plan_pull(
    repo: str,
    revision: str | None = None,
    include: Sequence[str] = (),
    *,
    cache_dir: Path | None = None,
    free_space: Callable[[Path], int] = free_bytes,
    choose: Callable[[Sequence[str]], Sequence[str]] | None = None,
) -> PullPlan:
    """List the repo's files and sizes on the Hub and check them against the free disk.
    `choose` narrows the files matching `include` to those an engine will load (llama.cpp
    picks one quantisation of a GGUF repo)."""
    from huggingface_hub import HfApi

    cache = cache_dir or hub_cache_dir()
    try:
        info = HfApi(endpoint=hub_endpoint(), token=hub_token()).model_info(
            repo, revision=revision, files_metadata=True
        )
    except Exception as exc:  # the library's errors, and httpx's for a Hub that is away
        raise translate(exc, repo) from exc
    files = tuple(
        RemoteFile(s.rfilename, int(s.size or 0), s.lfs.sha256 if s.lfs else None)
        for s in info.siblings or ()
        if _selected(s.rfilename, include)
    )
    if choose is not None:
        chosen = set(choose([f.name for f in files]))
        files = tuple(f for f in files if f.name in chosen)
    if not files:
        raise RepoNotFound(
            f"{repo}: no file matches {', '.join(include)}"
            if include
            else f"{repo}: the repo lists no files"
        )
    total = sum(f.size for f in files)
    needed = total - _already_here(cache, repo, str(info.sha), files)
    free = free_space(cache)
    if needed > free:
        raise NoSpace(
            f"{repo} needs {needed / GIB:.2f} GiB more but {cache} has "
            f"{free / GIB:.2f} GiB free ({total / GIB:.2f} GiB in all)"
        )
    ref = None if revision is not None and revision == str(info.sha) else (revision or "main")
    return PullPlan(repo, str(info.sha), files, cache, total, needed, free, ref)


def _already_here(cache: Path, repo: str, commit: str, files: Sequence[RemoteFile]) -> int:
    """Bytes already in the cache: files of this commit's snapshot, and complete LFS blobs
    (shared with other revisions)."""
    folder = cache / ("models--" + repo.replace("/", "--"))
    blobs = folder / "blobs"
    here = 0
    for f in files:
        if (folder / "snapshots" / commit / f.name).is_file():
            here += f.size
            continue
        if not f.sha256:
            continue
        if (blobs / f.sha256).is_file():
            here += f.size
    return here


class _Tracker:
    """Adds up the bytes huggingface_hub reports and turns them into PullProgress."""

    def __init__(
        self,
        plan: PullPlan,
        on_progress: Callable[[PullProgress], object],
        cancel: threading.Event | None = None,
    ) -> None:
        self.plan, self.on_progress, self.cancel = plan, on_progress, cancel
        self.started = time.monotonic()
        self.finished = 0  # bytes of files done
        self.fetched = 0  # bytes fetched in this run
        self.file, self.file_done, self.file_total = "", 0, 0
        self.in_file = False  # file_done counts toward the total only until the file ends

    def begin(self, name: str, total: int, initial: int) -> None:
        self.file, self.file_total, self.file_done = name, total, initial
        self.in_file = True
        self.report()

    def advance(self, n: float) -> None:
        if self.cancel is not None and self.cancel.is_set():
            # raised inside huggingface_hub's read loop: it closes the connection and
            # deletes its partial file, as it does for Ctrl-C
            raise PullCancelled(f"cancelled during {self.file}")
        self.file_done += int(n)
        self.fetched += int(n)
        self.report()

    def end_file(self, size: int) -> None:
        self.finished += size
        self.file_done = self.file_total = size
        self.in_file = False

    def report(self) -> None:
        took = max(time.monotonic() - self.started, 1e-6)
        rate = self.fetched / took
        done = min(self.finished + (self.file_done if self.in_file else 0), self.plan.total)
        eta = (self.plan.total - done) / rate if rate > 0 else None
        self.on_progress(
            PullProgress(
                self.file, self.file_done, self.file_total, done, self.plan.total, rate, eta
            )
        )

    def bar_class(self) -> type:
        from tqdm.auto import tqdm

        tracker = self

        class Bar(tqdm):
            """huggingface_hub's byte bar, drawn by sparkdeck instead of on stderr."""

            def __init__(self, *args: object, **kwargs: object) -> None:
                kwargs.pop("name", None)
                kwargs["file"], kwargs["disable"] = io.StringIO(), False
                super().__init__(*args, **kwargs)
                tracker.begin(tracker.file, int(self.total or 0), int(self.n))

            def update(self, n: float | None = 1) -> bool | None:
                tracker.advance(n or 0)
                return super().update(n)

        return Bar


def pull(
    plan: PullPlan,
    on_progress: Callable[[PullProgress], object],
    cancel: threading.Event | None = None,
) -> Path:
    """Fetch every file of the plan; the snapshot directory. Ctrl-C, or `cancel` set (the
    TUI's Esc), raises PullCancelled (completed files stay for the next pull); a file whose
    sha256 differs from the Hub's is removed and raises ChecksumMismatch. Once every file is
    here the plan's ref (main, or the branch asked for) names the commit, as a download by
    branch leaves it, so engines started with HF_HUB_OFFLINE=1 find the snapshot."""
    from huggingface_hub import hf_hub_download

    tracker = _Tracker(plan, on_progress, cancel)
    bar = tracker.bar_class()
    path = ""
    for done, remote in enumerate(plan.files):  # done: the files complete before this one
        tracker.file, tracker.file_done, tracker.file_total = remote.name, 0, remote.size
        try:
            path = hf_hub_download(
                plan.repo,
                remote.name,
                revision=plan.commit,
                cache_dir=str(plan.cache_dir),
                endpoint=hub_endpoint(),
                token=hub_token(),
                tqdm_class=bar,
            )
        except (KeyboardInterrupt, PullCancelled):
            raise PullCancelled(
                f"stopped during {remote.name}: {done} of {len(plan.files)} file(s) complete "
                f"stay in the cache and `sparkdeck models pull {plan.repo}` resumes after "
                "them (huggingface_hub does not keep a partly fetched file)"
            ) from None
        except Exception as exc:
            raise translate(exc, plan.repo) from exc
        _verify(Path(path), remote)
        tracker.end_file(remote.size)
        tracker.report()
    _record_ref(plan)
    snapshot = Path(path)
    for _ in Path(plan.files[-1].name).parts:
        snapshot = snapshot.parent
    return snapshot


def _record_ref(plan: PullPlan) -> None:
    """refs/<ref> holds the commit: the cache's own record of which snapshot a branch is
    (huggingface_hub writes it only for downloads by branch name; files fetched by commit,
    as here so that every file comes from one commit, leave none)."""
    from sparkdeck.config.paths import atomic_write_text

    if plan.ref is None:
        return
    ref = plan.cache_dir / ("models--" + plan.repo.replace("/", "--")) / "refs" / plan.ref
    atomic_write_text(ref, plan.commit, mode=0o644)


def _verify(path: Path, remote: RemoteFile) -> None:
    """The file's size, and for an LFS file its sha256, against what the Hub listed."""
    blob = path.resolve()
    size = blob.stat().st_size
    bad = None
    if remote.size and size != remote.size:
        bad = f"{size:,} bytes where the Hub lists {remote.size:,}"
    elif remote.sha256:
        digest = hashlib.sha256()
        with blob.open("rb") as handle:
            for chunk in iter(lambda: handle.read(1 << 20), b""):
                digest.update(chunk)
        if digest.hexdigest() != remote.sha256:
            bad = f"sha256 {digest.hexdigest()[:12]}... where the Hub lists {remote.sha256[:12]}..."
    if bad:
        path.unlink(missing_ok=True)  # the snapshot's link, then the blob it pointed at
        blob.unlink(missing_ok=True)
        raise ChecksumMismatch(f"{remote.name}: {bad}; the file was removed, not kept")
