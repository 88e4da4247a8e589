"""Where sparkdeck reads and writes files.

User files live in the platformdirs config and data dirs; SPARKDECK_CONFIG_DIR and
SPARKDECK_DATA_DIR override them so tests (and users with unusual setups) never touch the
default locations. Bundled presets and themes ship inside the wheel under `_bundled/`; in a
source checkout they are read from the repo top level.
"""

from __future__ import annotations

import errno
import json
import os
import tempfile
import time
from pathlib import Path
from typing import Any

import platformdirs

APP_NAME = "sparkdeck"
_PACKAGE_DIR = Path(__file__).resolve().parent.parent  # sparkdeck/, this file being config/paths.py


def config_dir() -> Path:
    """Directory for settings.toml and the user's presets/ and themes/."""
    override = os.environ.get("SPARKDECK_CONFIG_DIR")
    return Path(override) if override else Path(platformdirs.user_config_dir(APP_NAME))


def data_dir() -> Path:
    """Directory for state sparkdeck writes: attached engines, launch files, records."""
    override = os.environ.get("SPARKDECK_DATA_DIR")
    return Path(override) if override else Path(platformdirs.user_data_dir(APP_NAME))


def _bundled(name: str) -> Path:
    installed = _PACKAGE_DIR / "_bundled" / name
    if installed.is_dir():
        return installed
    return _PACKAGE_DIR.parent / name  # source checkout / editable install


def bundled_presets_dir() -> Path:
    return _bundled("presets")


def bundled_themes_dir() -> Path:
    return _bundled("themes")


def user_presets_dir() -> Path:
    return config_dir() / "presets"


def user_themes_dir() -> Path:
    return config_dir() / "themes"


# One rule for what sparkdeck keeps in its data dir: conversations, prompts, benchmark runs
# and launch records are the user's own business, so files are 0600 and folders 0700.
PRIVATE_FILE = 0o600
PRIVATE_DIR = 0o700
# A temporary file of an atomic write older than this is a leftover whatever its name says.
STALE_TMP_S = 60.0


def _inside(path: Path, folder: Path) -> bool:
    try:
        path.resolve().relative_to(folder.resolve())
    except ValueError:
        return False
    return True


def ensure_dir(path: Path) -> Path:
    """Create `path` (and parents); inside the data dir every folder is made private.

    Folders an older sparkdeck created with the default 0755 are tightened too; folders
    outside the data dir (an export's --output folder) are the user's and left as they are.
    """
    root = data_dir()
    if not _inside(path, root):
        path.mkdir(parents=True, exist_ok=True)
        return path
    path.mkdir(mode=PRIVATE_DIR, parents=True, exist_ok=True)
    for folder in (path, *path.parents):
        if not _inside(folder, root):
            break
        try:
            if folder.stat().st_mode & 0o077:
                os.chmod(folder, PRIVATE_DIR)
        except OSError:
            pass  # not ours to change (another owner): the files inside are still 0600
    return path


def private_file(path: Path) -> None:
    """Make sure a file sparkdeck writes without atomic_write_text (SQLite) is 0600.

    Created empty when missing, so the first open never leaves it with the umask's mode;
    SQLite gives its journal files the mode of the database file.
    """
    ensure_dir(path.parent)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT, PRIVATE_FILE)
    try:
        if os.fstat(fd).st_mode & 0o077:
            os.fchmod(fd, PRIVATE_FILE)
    finally:
        os.close(fd)


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # someone else's process: alive
    return True


def remove_stale_temp_files(path: Path, now: float | None = None) -> int:
    """Delete `.{name}.*` leftovers of atomic writes that a killed writer never renamed.

    A temporary name carries its writer's PID (`.{name}.{pid}.{random}.tmp`): one whose
    writer is gone is removed at once; any other (an older naming, or a PID reused by an
    unrelated process) once it is older than a minute, far longer than a write takes.
    Returns how many were removed.
    """
    now = time.time() if now is None else now
    removed = 0
    try:
        candidates = list(path.parent.glob(f".{path.name}.*"))
    except OSError:
        return 0
    for tmp in candidates:
        parts = tmp.name[len(path.name) + 2 :].split(".")
        pid = int(parts[0]) if len(parts) == 3 and parts[0].isdigit() else None
        try:
            if pid == os.getpid():
                continue  # a write of this process in another thread
            dead = pid is not None and not _pid_alive(pid)
            if dead or now - tmp.stat().st_mtime > STALE_TMP_S:
                tmp.unlink()
                removed += 1
        except OSError:
            continue  # already gone (another cleaner) or not ours to remove
    return removed


def atomic_write_text(path: Path, text: str, mode: int = PRIVATE_FILE) -> None:
    """Write a file so that readers see either the old or the new content, never half.

    The temporary file sits in the same directory so the final rename stays on one filesystem;
    it is named with the writer's PID so that the next writer can clean up after one that was
    killed mid-write. Files are private (0600) unless the caller says otherwise.
    """
    ensure_dir(path.parent)
    remove_stale_temp_files(path)
    fd, tmp = tempfile.mkstemp(
        prefix=f".{path.name}.{os.getpid()}.", suffix=".tmp", dir=path.parent
    )
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise


# ----- JSON lines, appended whole --------------------------------------------------------
# A full disk makes `write()` short: the kernel writes what fits and says ENOSPC for the rest.
# A JSONL file then ends in half a line, and the next line appended once space returns is
# glued onto it: one unparsable line, and a reader loses a good record with the torn one. So
# every append is one `write()` of whole lines on an O_APPEND descriptor, and a short or
# failed write is cut back to where the file ended (`ftruncate`); a tail torn anyway (a
# crash, a power cut) gets a newline before the next record, so it only costs itself.
# Readers skip a line that does not parse. Used by the endpoint's request log and saved
# conversations: one writer each (the cut back never cuts another's line).

FULL = (errno.ENOSPC, errno.EDQUOT)


def open_for_append(path: Path, mode: int = 0o600) -> int:
    """A descriptor that appends to `path` (created `mode`) and can read its last byte."""
    return os.open(path, os.O_RDWR | os.O_APPEND | os.O_CREAT, mode)


def append_whole(fd: int, data: bytes) -> None:
    """Append `data` (whole lines, ending in a newline) to `fd` all or nothing.

    Raises OSError when it could not; the file then ends where it did before."""
    end = os.fstat(fd).st_size
    if end and os.pread(fd, 1, end - 1) != b"\n":
        data = b"\n" + data  # a torn tail: it stays one bad line, not glued to this one
    try:
        written = os.write(fd, data)
        if written != len(data):  # a short write: the rest did not fit
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
    except OSError:
        try:
            os.ftruncate(fd, end)
        except OSError:  # nothing more to do: the next append starts a new line anyway
            pass
        raise


def parse_json_lines(raw: bytes) -> tuple[list[dict[str, Any]], int]:
    """The JSON objects of `raw`, one a line, and how many lines were skipped (torn by a
    crash or a full disk, or not objects)."""
    records, skipped = [], 0
    for line in raw.split(b"\n"):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except (ValueError, RecursionError):  # RecursionError: a line nested 1,000+ deep
            skipped += 1
            continue
        if isinstance(record, dict):
            records.append(record)
        else:
            skipped += 1
    return records, skipped


def disk_full(exc: OSError) -> bool:
    return exc.errno in FULL
