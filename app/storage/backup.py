"""Backups of the conversation database, restores, and salvaging a damaged one.

Copies go through SQLite's online backup API (never a raw file copy, which can catch a write half done or
miss what is still in the WAL) and are trusted only after `PRAGMA integrity_check` passes on the copy.
"""

from __future__ import annotations

import logging
import shutil
import sqlite3
from contextlib import closing
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from filelock import FileLock, Timeout

from app.errors import HearthError
from app.fsutil import make_private_dir, tighten
from app.paths import HearthPaths
from app.storage.db import BUSY_TIMEOUT_MS, backup_name, check_file, copy_verified, integrity, known_revisions

log = logging.getLogger("hearth.backup")

BACKUP_PATTERN = "hearth-*.sqlite3"
_SIDE_FILES = ("-wal", "-shm")


@dataclass(frozen=True)
class BackupInfo:
    path: Path
    created: datetime
    size_bytes: int


@dataclass(frozen=True)
class RestoreResult:
    restored_from: Path
    # Where the database that was replaced went: a verified backup, or (damaged) the file moved aside.
    previous: Path | None
    previous_damaged: bool


def create_backup(paths: HearthPaths, destination: Path | None = None) -> Path:
    """Write a verified copy of the database to `destination` (a new file, or a folder to put a
    timestamped file in; default: the backups folder) and return its path."""
    source = paths.db_path
    if not source.is_file():
        raise HearthError(f"There is no conversation database at {source} yet: nothing to back up.")
    if destination is None:
        target = paths.backups_dir / backup_name("manual")
    elif destination.is_dir():
        target = destination / backup_name("manual")
    else:
        target = destination
    if target.exists():
        raise HearthError(f"{target} already exists; choose a new file name.")
    # Only Hearth's own backups folder is made owner-only; a folder the user chose is theirs to set.
    _copy_or_raise(source, target, what="The backup", private_dir=destination is None)
    log.info("backed up %s to %s", source, target)
    return target


def list_backups(paths: HearthPaths) -> list[BackupInfo]:
    """Backups in the backups folder (taken before migrations, restores, or by `hearth backup`), newest
    first."""
    if not paths.backups_dir.is_dir():
        return []
    found = []
    for path in paths.backups_dir.glob(BACKUP_PATTERN):
        if path.is_file():
            stat = path.stat()
            found.append(BackupInfo(path, datetime.fromtimestamp(stat.st_mtime, UTC), stat.st_size))
    return sorted(found, key=lambda b: (b.created, b.path.name), reverse=True)


def verify_backup(path: Path) -> str:
    """Check that `path` is an intact Hearth database this version can open; return its schema revision.

    Raises HearthError naming what is wrong.
    """
    if not path.is_file():
        raise HearthError(f"{path} does not exist or is not a file.")
    _head, known = known_revisions()
    try:
        with closing(sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True)) as conn:
            verdict = integrity(conn, thorough=True)
            if verdict != "ok":
                raise HearthError(f"The backup {path} is damaged ({verdict}); nothing was restored.")
            tables = {row[0] for row in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
            if "alembic_version" not in tables or "messages" not in tables:
                raise HearthError(f"{path} is not a Hearth conversation database; nothing was restored.")
            row = conn.execute("SELECT version_num FROM alembic_version").fetchone()
    except sqlite3.DatabaseError as exc:
        raise HearthError(f"{path} is not a readable SQLite database ({exc}); nothing was restored.") from exc
    revision = str(row[0]) if row else ""
    if revision not in known:
        raise HearthError(
            f"The backup {path} was written by a newer version of Hearth (schema {revision or '?'}); "
            "update Hearth to restore it. Nothing was restored."
        )
    return revision


def restore_backup(paths: HearthPaths, backup: Path, *, lock_held: bool = False) -> RestoreResult:
    """Replace the database with a verified backup, keeping the one it replaces.

    Refuses while a Hearth window is running (it holds the instance lock), unless the caller is that window
    (`lock_held`) and has closed its database. The current database is first backed up (or, when damaged,
    moved aside into the backups folder); the backup is then copied next to the database, verified, and
    renamed over it, so an interrupted restore leaves either the old or the new database, never half of one.
    A backup of an older schema is migrated at the next start, after a backup of its own.
    """
    verify_backup(backup)
    if lock_held:
        return _restore(paths, backup)
    lock = FileLock(paths.instance_lock)
    try:
        lock.acquire(timeout=0)
    except Timeout:
        raise HearthError("Hearth is running: close its window, then restore.") from None
    try:
        return _restore(paths, backup)
    finally:
        lock.release()


def _restore(paths: HearthPaths, backup: Path) -> RestoreResult:
    target = paths.db_path
    make_private_dir(paths.backups_dir)
    previous: Path | None = None
    damaged = False
    if target.exists():
        if _check_in_place(target) == "ok":
            previous = paths.backups_dir / backup_name("pre-restore")
            _copy_or_raise(target, previous, what="The backup of the current database", private_dir=True)
            _checkpoint_and_close(target)
        else:
            damaged = True
            previous = paths.backups_dir / backup_name("damaged")
            _move_aside(target, previous)
    staged = target.with_name(f"{target.name}.restoring")
    staged.unlink(missing_ok=True)
    _copy_or_raise(backup, staged, what="The copy of the backup", private_dir=True)
    staged.replace(target)
    log.warning("restored %s from %s (the previous database is at %s)", target, backup, previous)
    return RestoreResult(backup, previous, damaged)


def _check_in_place(path: Path) -> str:
    try:
        return check_file(path, thorough=True)
    except sqlite3.Error as exc:
        # Not even readable: it is moved aside like a damaged one, and the backup takes its place.
        return str(exc)


def _copy_or_raise(source: Path, destination: Path, *, what: str, private_dir: bool = False) -> None:
    try:
        if private_dir:
            make_private_dir(destination.parent)
        else:
            destination.parent.mkdir(parents=True, exist_ok=True)
        verdict = copy_verified(source, destination)
    except (OSError, sqlite3.Error) as exc:
        destination.unlink(missing_ok=True)
        raise HearthError(
            f"{what} could not be written to {destination} ({exc}); nothing was changed."
        ) from exc
    except BaseException:
        destination.unlink(missing_ok=True)
        raise
    if verdict != "ok":
        destination.unlink(missing_ok=True)
        raise HearthError(
            f"{what} failed verification ({verdict}): {source} may be damaged. Nothing was changed; "
            "`hearth conversations export --all` saves what can still be read."
        )


def _checkpoint_and_close(path: Path) -> None:
    """Fold the WAL into the file so that renaming another file over it cannot pair it with a stale WAL."""
    with closing(sqlite3.connect(path, timeout=BUSY_TIMEOUT_MS / 1000)) as conn:
        busy, _frames, _done = conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()
        if busy:
            raise HearthError(f"{path} is in use by another program; close it, then restore.")
        conn.execute("PRAGMA journal_mode=DELETE")
    for suffix in _SIDE_FILES:
        Path(f"{path}{suffix}").unlink(missing_ok=True)


def _move_aside(path: Path, destination: Path) -> None:
    for suffix in ("", *_SIDE_FILES):
        side = Path(f"{path}{suffix}")
        if side.exists():
            moved = Path(f"{destination}{suffix}")
            shutil.move(side, moved)
            # A damaged database from an older Hearth may be readable to others; in backups it must not be.
            tighten(moved)
