"""Small file-system helpers shared by everything that writes files atomically or keeps them private."""

from __future__ import annotations

import logging
import os
import stat
from pathlib import Path
from typing import Final

log = logging.getLogger("hearth.fsutil")

# Conversations, logs and backups are the user's alone: owner-only modes, set explicitly at creation rather
# than through os.umask, which is process-wide and would race with every other thread creating files.
PRIVATE_DIR_MODE: Final = 0o700
PRIVATE_FILE_MODE: Final = 0o600
# Windows has no mode bits (os.chmod only toggles read-only); its per-user profile ACLs do this job there.
_HAS_MODES: Final = os.name == "posix"


def fsync_directory(directory: Path) -> None:
    """Make a rename into `directory` durable. Windows cannot open a directory to fsync it (NTFS journals the
    rename itself), so this is POSIX only."""
    if os.name != "posix":
        return
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def make_private_dir(directory: Path) -> Path:
    """Create `directory` (and missing parents) if needed, and leave it owner-only. Only the last component
    is tightened: parents such as ~/.local/share are not Hearth's to change."""
    directory.mkdir(mode=PRIVATE_DIR_MODE, parents=True, exist_ok=True)
    tighten(directory)
    return directory


def create_private_file(path: Path) -> None:
    """Create `path` empty and owner-only if it does not exist; tighten it if it does. SQLite gives its -wal,
    -shm and journal files the mode of the database file, so creating that one first covers them all."""
    os.close(private_opener(str(path), os.O_WRONLY | os.O_CREAT))


def private_opener(path: str, flags: int) -> int:
    """An `opener` for open(): new files are created owner-only, and one an older Hearth left readable to
    others is tightened."""
    fd = os.open(path, flags, PRIVATE_FILE_MODE)
    if _HAS_MODES:
        try:
            _tighten_fd(fd)
        except OSError as exc:
            log.warning("could not make %s private: %s", path, exc)
    return fd


def tighten(path: Path) -> None:
    """Remove group and other permissions from `path` if it exists; never adds any. A file the user does not
    own (a shared folder) is left as it is, with a warning."""
    if not _HAS_MODES:
        return
    try:
        info = path.lstat()
        # A link's own mode means nothing, and following it could change a file outside the home.
        if not stat.S_ISLNK(info.st_mode) and info.st_mode & 0o077:
            path.chmod(stat.S_IMODE(info.st_mode) & ~0o077)
    except FileNotFoundError:
        return
    except OSError as exc:
        log.warning("could not make %s private: %s", path, exc)


def _tighten_fd(fd: int) -> None:
    mode = stat.S_IMODE(os.fstat(fd).st_mode)
    if mode & 0o077:
        os.fchmod(fd, mode & ~0o077)
