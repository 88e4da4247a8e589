"""The service's log: `logging` with timestamps and levels, to a rotating file in the data dir.

The service runs for weeks, so what it writes must be dated, graded and bounded: service.log
grows to LOG_BYTES and is then renamed service.log.1 (LOG_BACKUPS old files are kept, the
oldest dropped), all of mode 0600 like everything else in the data dir.

A detached service's stdout and stderr are service.log itself (client.start_detached opens it
for them before logging exists here): a crash before logging is set up, or a C library's
message, still lands in the log. On each rollover those two descriptors are pointed at the new
file, so raw output never goes on into a renamed one. A service run in the foreground
(`sparkdeck service run`, the systemd unit) also writes each record to stderr, where the
terminal or the journal shows it; the journal dates records itself.
"""

from __future__ import annotations

import logging
import logging.handlers
import os
import sys
from pathlib import Path

from sparkdeck.config import paths

LOG_BYTES = 1024 * 1024  # about 10,000 lines: weeks of an idle service, hours of a busy one
LOG_BACKUPS = 3
FORMAT = "%(asctime)s %(levelname)-7s %(name)s: %(message)s"
DATE_FORMAT = "%Y-%m-%dT%H:%M:%S%z"


class _PrivateRotatingLog(logging.handlers.RotatingFileHandler):
    """A rotating file made 0600, which carries fds 1 and 2 along to each new file when they
    were the log (a detached service's)."""

    def __init__(self, path: Path, max_bytes: int, backups: int, follow_std: bool) -> None:
        self.follow_std = follow_std
        super().__init__(path, maxBytes=max_bytes, backupCount=backups, encoding="utf-8")
        os.chmod(self.baseFilename, paths.PRIVATE_FILE)  # (its folder is 0700 meanwhile)

    def doRollover(self) -> None:  # noqa: N802 - the library's name
        super().doRollover()
        os.chmod(self.baseFilename, paths.PRIVATE_FILE)
        if self.follow_std and self.stream is not None:
            for std in (sys.stdout, sys.stderr):
                std.flush()
            for fd in (1, 2):
                os.dup2(self.stream.fileno(), fd)


def _same_file(fd: int, path: Path) -> bool:
    try:
        mine, theirs = os.fstat(fd), os.stat(path)
    except OSError:
        return False
    return (mine.st_dev, mine.st_ino) == (theirs.st_dev, theirs.st_ino)


def setup(path: Path, max_bytes: int = LOG_BYTES, backups: int = LOG_BACKUPS) -> logging.Logger:
    """Send every logger's records (the service's, uvicorn's, warnings) to `path`, rotated,
    and to stderr too unless stderr already is that file. Returns the service's logger."""
    paths.ensure_dir(path.parent)
    detached = _same_file(2, path)
    handler = _PrivateRotatingLog(path, max_bytes, backups, follow_std=detached)
    handler.setFormatter(logging.Formatter(FORMAT, DATE_FORMAT))
    root = logging.getLogger()
    for old in [h for h in root.handlers if isinstance(h, _PrivateRotatingLog)]:
        root.removeHandler(old)
        old.close()
    root.addHandler(handler)
    if not detached and not any(type(h) is logging.StreamHandler for h in root.handlers):
        console = logging.StreamHandler(sys.stderr)
        # the journal stamps each line itself; a terminal gets the file's format
        dated = "JOURNAL_STREAM" not in os.environ
        console.setFormatter(
            logging.Formatter(FORMAT if dated else "%(levelname)s %(message)s", DATE_FORMAT)
        )
        root.addHandler(console)
    root.setLevel(logging.INFO)
    # httpx logs every request at INFO: the engine's /metrics each second would fill the
    # 3 MiB of log in hours and push out what the guard and the service said
    for chatty in ("httpx", "httpcore"):
        logging.getLogger(chatty).setLevel(logging.WARNING)
    logging.captureWarnings(True)
    return logging.getLogger("sparkdeck.service")
