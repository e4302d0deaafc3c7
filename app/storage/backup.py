"""Backups of the conversation database and the files it holds, restores, and keeping a damaged database.

A backup is a folder, `hearth-<UTC time>-<reason>/`, that can be copied anywhere (a USB stick's FAT file
system included: no file in it is larger than the database or one attachment):

- `hearth.sqlite3`: the database, copied with SQLite's online backup API (never a raw file copy, which can
  catch a write half done or miss what is still in the WAL), trusted once `PRAGMA integrity_check` passes;
- `attachments/ab/<sha256>`: every file the copy's `files` table lists, hashed as it is written. Copies, never
  hard links: deleting a file overwrites the store's bytes in place, which would reach a linked backup;
- `backup.json`, written last: the files the store had already lost (or whose bytes no longer matched their
  SHA-256) when the backup was taken, so that verifying it does not count them as missing from it.

It is written as `<name>.partial/` and renamed only once all of it is verified, so a folder with a backup's
name is whole; a failure (a full disk, a file that cannot be read) removes the partial one.

A lone `hearth-*.sqlite3` file is a backup of the database only: an earlier Hearth's, or one taken before a
migration (app.storage.db: a migration never touches the stored files, and putting the database back after a
failed one needs none). Those still list, verify and restore; their attachments are what the store still has.
"""

from __future__ import annotations

import errno
import json
import logging
import os
import shutil
import sqlite3
from collections.abc import Iterable, Sequence
from contextlib import closing
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Final

from filelock import FileLock, Timeout

from app.attachments.files import FileMismatch, FileStore, copy_checked, file_sha256, is_sha256
from app.errors import HearthError
from app.fsutil import fsync_directory, make_private_dir, private_opener, tighten
from app.paths import HearthPaths
from app.storage.db import BUSY_TIMEOUT_MS, backup_name, check_file, copy_verified, integrity, known_revisions

log = logging.getLogger("hearth.backup")

DATABASE_NAME: Final = "hearth.sqlite3"
ATTACHMENTS_DIR: Final = "attachments"
MANIFEST_NAME: Final = "backup.json"
MANIFEST_FORMAT: Final = "hearth-backup"
MANIFEST_VERSION: Final = 1
PARTIAL_SUFFIX: Final = ".partial"
_DATABASE_ONLY_SUFFIX: Final = ".sqlite3"
_SIDE_FILES: Final = ("-wal", "-shm")
# What an estimate of the space needed adds per file: the file system allocates whole blocks.
_BLOCK_BYTES: Final = 4096


@dataclass(frozen=True)
class BackupInfo:
    path: Path  # the backup's folder, or the file of a database-only backup
    created: datetime
    size_bytes: int
    files: int | None  # the attached files it carries; None for a database-only backup

    @property
    def database(self) -> Path:
        return database_of(self.path)


@dataclass(frozen=True)
class BackupFile:
    """A stored file a backed-up database lists, with the name a message gave it (for messages)."""

    sha256: str
    size_bytes: int
    name: str

    @property
    def label(self) -> str:
        return f"{self.name} ({self.sha256[:12]})" if self.name else self.sha256


@dataclass(frozen=True)
class VerifiedBackup:
    path: Path
    revision: str  # the schema revision of its database
    files: tuple[BackupFile, ...]  # every file its database lists
    # Listed but not in the backup: lost from the store before it was taken (or, for a database-only backup,
    # every listed file: they were never in it).
    lost: tuple[BackupFile, ...]

    @property
    def database(self) -> Path:
        return database_of(self.path)

    @property
    def carried(self) -> tuple[BackupFile, ...]:
        lost = {f.sha256 for f in self.lost}
        return tuple(f for f in self.files if f.sha256 not in lost)


@dataclass(frozen=True)
class RestoreResult:
    restored_from: Path
    # Where the database that was replaced went: a verified backup, or (damaged) a folder it was moved into.
    previous: Path | None
    previous_damaged: bool
    files_put_back: int  # attached files copied from the backup into the store (those it lacked)
    # Attached files the restored database lists that neither the backup nor the store has (their messages say
    # the file is no longer stored): labels, as in BackupFile.label.
    files_missing: tuple[str, ...]


def database_of(backup: Path) -> Path:
    """The database file of a backup: in its folder, or the file itself for a database-only backup."""
    return backup / DATABASE_NAME if backup.is_dir() else backup


def create_backup(paths: HearthPaths, destination: Path | None = None) -> VerifiedBackup:
    """Write a verified backup of the database and its attached files to `destination` (a folder to put a
    timestamped backup in, or the new backup folder's name; default: the backups folder) and return it."""
    source = paths.db_path
    if not source.is_file():
        raise HearthError(f"There is no conversation database at {source} yet: nothing to back up.")
    if destination is None:
        target = paths.backups_dir / _folder_name("manual")
    elif destination.is_dir() and not (destination / MANIFEST_NAME).exists():
        target = destination / _folder_name("manual")
    elif destination.exists():
        raise HearthError(f"{destination} already exists; choose a new name.")
    elif destination.suffix == _DATABASE_ONLY_SUFFIX:
        raise HearthError(
            "A backup is a folder (the database and its attached files): name a folder, "
            f"not {destination.name}."
        )
    else:
        target = destination
    if target.exists():
        raise HearthError(f"{target} already exists; choose a new name.")
    # Only Hearth's own backups folder is made owner-only; a folder the user chose is theirs to set (the
    # backup's own folder, which Hearth creates, is always owner-only).
    backup = _write_backup(
        source,
        FileStore(paths.attachments_dir),
        target,
        what="The backup",
        private_parent=destination is None,
    )
    log.info("backed up %s and %d attached files to %s", source, len(backup.carried), target)
    return backup


def list_backups(paths: HearthPaths) -> list[BackupInfo]:
    """Backups in the backups folder (taken before migrations and restores, or by `hearth backup`), newest
    first. A partial one (being written, or interrupted) is not listed."""
    if not paths.backups_dir.is_dir():
        return []
    found = []
    for path in paths.backups_dir.glob("hearth-*"):
        if path.is_file() and path.suffix == _DATABASE_ONLY_SUFFIX:
            stat = path.stat()
            found.append(BackupInfo(path, datetime.fromtimestamp(stat.st_mtime, UTC), stat.st_size, None))
        elif (
            path.is_dir()
            and not path.name.endswith(PARTIAL_SUFFIX)
            and (path / MANIFEST_NAME).is_file()
            and (path / DATABASE_NAME).is_file()
        ):
            sizes = [f.stat().st_size for f in FileStore(path / ATTACHMENTS_DIR).stored()]
            created = datetime.fromtimestamp((path / MANIFEST_NAME).stat().st_mtime, UTC)
            size = (path / DATABASE_NAME).stat().st_size + sum(sizes)
            found.append(BackupInfo(path, created, size, len(sizes)))
    return sorted(found, key=lambda b: (b.created, b.path.name), reverse=True)


def verify_backup(path: Path) -> VerifiedBackup:
    """Check that `path` is a whole Hearth backup this version can restore: its database intact and of a
    schema this Hearth knows, and (a backup folder) every attached file it lists there, with its SHA-256.

    Raises HearthError naming what is wrong (the attached file, for one missing or changed).
    """
    if path.is_dir():
        if not (path / DATABASE_NAME).is_file():
            raise HearthError(f"{path} is not a Hearth backup: it has no {DATABASE_NAME}.")
        lost_shas = _read_manifest(path)
    elif path.is_file():
        lost_shas = None
    else:
        raise HearthError(f"{path} does not exist.")
    revision, listed = _check_database(database_of(path), path)
    if lost_shas is None:
        return VerifiedBackup(path, revision, listed, listed)
    carried = FileStore(path / ATTACHMENTS_DIR)
    for file in listed:
        if file.sha256 in lost_shas:
            continue
        try:
            digest = file_sha256(carried.path(file.sha256))
        except FileNotFoundError:
            raise HearthError(
                f"The backup {path} is incomplete: the attached file {file.label} is missing from it."
            ) from None
        except OSError as exc:
            raise HearthError(
                f"The attached file {file.label} in the backup {path} cannot be read ({exc.strerror or exc})."
            ) from exc
        if digest != file.sha256:
            raise HearthError(
                f"The backup {path} is damaged: the attached file {file.label} does not match its SHA-256."
            )
    return VerifiedBackup(path, revision, listed, tuple(f for f in listed if f.sha256 in lost_shas))


def restore_backup(paths: HearthPaths, backup: Path, *, lock_held: bool = False) -> RestoreResult:
    """Replace the database with a verified backup, put back the attached files the store lacks, and keep
    what it replaces.

    Refuses while a Hearth window is running (it holds the instance lock), unless the caller is that window
    (`lock_held`) and has closed its database. The whole backup is verified first: one missing or changed
    file and nothing is replaced. The current database is then backed up with its files (or, when damaged,
    moved aside into the backups folder with the files it lists), the backup's files the store lacks are
    copied in (each checked as it is written), and the backup's database is copied next to the current one,
    verified, and renamed over it, so an interrupted restore leaves either the old or the new database, never
    half of one. Files the store has and the backup lacks stay until the next start's release of what the
    restored database does not hold. A backup of an older schema is migrated at the next start, after a
    backup of its own.
    """
    try:
        verified = verify_backup(backup)
    except HearthError as exc:
        raise HearthError(f"{exc} Nothing was restored.") from exc
    if lock_held:
        return _restore(paths, verified)
    lock = FileLock(paths.instance_lock)
    try:
        lock.acquire(timeout=0)
    except Timeout:
        raise HearthError("Hearth is running: close its window, then restore.") from None
    try:
        return _restore(paths, verified)
    finally:
        lock.release()


def _restore(paths: HearthPaths, backup: VerifiedBackup) -> RestoreResult:
    target = paths.db_path
    store = FileStore(paths.attachments_dir)
    make_private_dir(paths.backups_dir)
    put_back = [f for f in backup.carried if not store.has(f.sha256)]
    intact = target.exists() and _check_in_place(target) == "ok"
    # Everything this writes, before it writes any of it: the backup of what is replaced, the files put
    # back, and the copy of the backup's database.
    needed = _estimate(target, store) if target.exists() else 0
    needed += backup.database.stat().st_size + sum(f.size_bytes + _BLOCK_BYTES for f in put_back)
    _require_space(paths.home, needed, "The restore", "nothing was replaced")
    previous: Path | None = None
    if target.exists():
        if intact:
            previous = _write_backup(
                target,
                store,
                paths.backups_dir / _folder_name("pre-restore"),
                what="The backup of the current database",
                private_parent=True,
            ).path
            _checkpoint_and_close(target)
        else:
            previous = paths.backups_dir / _folder_name("damaged")
            _keep_damaged(target, store, previous)
    _put_back(backup, put_back, store)
    staged = target.with_name(f"{target.name}.restoring")
    staged.unlink(missing_ok=True)
    _copy_database(backup.database, staged, what="The copy of the backup")
    staged.replace(target)
    missing = tuple(f.label for f in backup.files if not store.has(f.sha256))
    log.warning(
        "restored %s from %s with %d attached files put back (the previous database is at %s)",
        target,
        backup.path,
        len(put_back),
        previous,
    )
    return RestoreResult(backup.path, previous, previous is not None and not intact, len(put_back), missing)


def _write_backup(
    database: Path, store: FileStore, target: Path, *, what: str, private_parent: bool
) -> VerifiedBackup:
    """Write a backup folder at `target` (which must not exist): in `<target>.partial`, renamed once whole."""
    partial = target.with_name(target.name + PARTIAL_SUFFIX)
    try:
        if private_parent:
            make_private_dir(target.parent)
        else:
            target.parent.mkdir(parents=True, exist_ok=True)
        # Never another's: a backup being written there, or one a crash interrupted, is left as it is.
        partial.mkdir(mode=0o700)
    except FileExistsError:
        raise HearthError(
            f"{partial} exists: a backup is being written there, or one was interrupted (then remove it)."
        ) from None
    except OSError as exc:
        raise HearthError(f"{what} could not be written to {target} ({exc.strerror or exc}).") from exc
    try:
        tighten(partial)
        _require_space(target.parent, _database_bytes(database), what, "nothing was kept")
        copy = partial / DATABASE_NAME
        _copy_database(database, copy, what=what)
        # Read from the copy: exactly the files of the snapshot it holds.
        revision, listed = _read_database(copy)
        _require_space(
            target.parent, sum(f.size_bytes + _BLOCK_BYTES for f in listed), what, "nothing was kept"
        )
        lost = _copy_files(listed, store, partial / ATTACHMENTS_DIR)
        _write_manifest(partial, lost)
        fsync_directory(partial)
        partial.rename(target)
        fsync_directory(target.parent)
    except OSError as exc:
        shutil.rmtree(partial, ignore_errors=True)
        if exc.errno == errno.ENOSPC:
            raise HearthError(
                f"Not enough disk space in {target.parent} for {_lower(what)}; nothing was kept."
            ) from exc
        raise HearthError(
            f"{what} could not be written to {target} ({exc.strerror or exc}); nothing was kept."
        ) from exc
    except BaseException:
        shutil.rmtree(partial, ignore_errors=True)
        raise
    if lost:
        log.warning("%d attached files were not in the store and are not in %s", len(lost), target)
    return VerifiedBackup(target, revision, listed, tuple(lost))


def _copy_files(listed: Sequence[BackupFile], store: FileStore, into: Path) -> list[BackupFile]:
    """Copy each listed file from the store, checking its SHA-256 as it is written; return those the store
    does not have (or whose bytes no longer match it). Raises OSError when one cannot be written."""
    carried = FileStore(into)
    lost: list[BackupFile] = []
    folders: set[Path] = set()
    if listed:
        make_private_dir(into)
    for file in listed:
        destination = carried.path(file.sha256)
        if destination.parent not in folders:
            make_private_dir(destination.parent)
            folders.add(destination.parent)
        try:
            copied = copy_checked(store.path(file.sha256), destination, file.sha256)
        except FileNotFoundError:
            if not destination.parent.is_dir():
                raise
            copied = False
        if not copied:
            lost.append(file)
    for folder in (*folders, into):
        if folder.is_dir():
            fsync_directory(folder)
    return lost


def _put_back(backup: VerifiedBackup, files: Iterable[BackupFile], store: FileStore) -> None:
    carried = FileStore(backup.path / ATTACHMENTS_DIR)
    for file in files:
        try:
            store.put_copy(carried.path(file.sha256), file.sha256)
        except FileMismatch:
            raise HearthError(
                f"The attached file {file.label} in the backup {backup.path} changed while it was restored; "
                "the database was not replaced."
            ) from None
        except OSError as exc:
            if exc.errno == errno.ENOSPC:
                raise HearthError(
                    f"Not enough disk space to put back the attached files of {backup.path}; the database "
                    "was not replaced."
                ) from exc
            raise HearthError(
                f"The attached file {file.label} could not be put back from {backup.path} "
                f"({exc.strerror or exc}); the database was not replaced."
            ) from exc


def _keep_damaged(database: Path, store: FileStore, target: Path) -> None:
    """Move a damaged database aside into a backup folder with copies of the files it lists (every stored
    file, when even its list cannot be read), so that what can still be salvaged from it keeps its files."""
    partial = target.with_name(target.name + PARTIAL_SUFFIX)
    make_private_dir(partial)
    try:
        try:
            _revision, listed = _read_database(database)
        except (sqlite3.DatabaseError, HearthError) as exc:
            log.warning(
                "the damaged %s does not say which files it holds (%s): keeping them all", database, exc
            )
            listed = tuple(BackupFile(p.name, p.stat().st_size, "") for p in store.stored())
        lost = _copy_files(listed, store, partial / ATTACHMENTS_DIR)
        _write_manifest(partial, lost)
    except OSError as exc:
        shutil.rmtree(partial, ignore_errors=True)
        raise HearthError(
            f"The files of the damaged database could not be kept in {target} ({exc.strerror or exc}); "
            "nothing was replaced."
        ) from exc
    except BaseException:
        shutil.rmtree(partial, ignore_errors=True)
        raise
    # Renames within the home's file system: nothing here can run out of space.
    for suffix in ("", *_SIDE_FILES):
        side = Path(f"{database}{suffix}")
        if side.exists():
            moved = partial / f"{DATABASE_NAME}{suffix}"
            shutil.move(side, moved)
            # A damaged database from an older Hearth may be readable to others; in backups it must not be.
            tighten(moved)
    partial.rename(target)
    fsync_directory(target.parent)


def _check_database(database: Path, shown: Path) -> tuple[str, tuple[BackupFile, ...]]:
    """The schema revision of a backup's intact database and the files it lists; HearthError otherwise."""
    _head, known = known_revisions()
    try:
        with closing(sqlite3.connect(f"{database.resolve().as_uri()}?mode=ro", uri=True)) as conn:
            verdict = integrity(conn, thorough=True)
            if verdict != "ok":
                raise HearthError(f"The backup {shown} is damaged ({verdict}).")
            tables = _tables(conn)
            if "alembic_version" not in tables or "messages" not in tables:
                raise HearthError(f"{shown} is not a Hearth conversation database.")
            row = conn.execute("SELECT version_num FROM alembic_version").fetchone()
            listed = _listed_files(conn, tables)
    except sqlite3.DatabaseError as exc:
        raise HearthError(f"{shown} is not a readable SQLite database ({exc}).") from exc
    revision = str(row[0]) if row else ""
    if revision not in known:
        raise HearthError(
            f"The backup {shown} was written by a newer version of Hearth (schema {revision or '?'}); "
            "update Hearth to restore it."
        )
    return revision, listed


def _read_database(database: Path) -> tuple[str, tuple[BackupFile, ...]]:
    """What a database that may be damaged still says: its revision and the files it lists."""
    with closing(sqlite3.connect(f"{database.resolve().as_uri()}?mode=ro", uri=True)) as conn:
        tables = _tables(conn)
        row = (
            conn.execute("SELECT version_num FROM alembic_version").fetchone()
            if "alembic_version" in tables
            else None
        )
        return (str(row[0]) if row else ""), _listed_files(conn, tables)


def _tables(conn: sqlite3.Connection) -> set[str]:
    return {str(row[0]) for row in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}


def _listed_files(conn: sqlite3.Connection, tables: set[str]) -> tuple[BackupFile, ...]:
    # Databases older than migration 0005 hold no files.
    if "files" not in tables:
        return ()
    names: dict[str, str] = {}
    for sha, name in conn.execute(
        "SELECT file_sha256, name FROM message_parts WHERE kind = 'attachment' AND file_sha256 IS NOT NULL "
        "AND name IS NOT NULL ORDER BY id"
    ):
        names.setdefault(str(sha), str(name))
    files = []
    for sha, size in conn.execute("SELECT sha256, size_bytes FROM files ORDER BY sha256"):
        if not is_sha256(str(sha)):
            raise HearthError(f"The database lists a stored file whose name is not a SHA-256: {sha!r}.")
        files.append(BackupFile(str(sha), int(size), names.get(str(sha), "")))
    return tuple(files)


def _read_manifest(folder: Path) -> frozenset[str]:
    """The files a backup folder's `backup.json` says the store had lost when it was taken."""
    path = folder / MANIFEST_NAME
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise HearthError(f"{folder} is not a whole Hearth backup: it has no {MANIFEST_NAME}.") from None
    except (OSError, ValueError) as exc:
        raise HearthError(f"{path} cannot be read ({exc}).") from exc
    if (
        not isinstance(data, dict)
        or data.get("format") != MANIFEST_FORMAT
        or not isinstance(data.get("lost"), list)
    ):
        raise HearthError(f"{path} is not a Hearth backup's description.")
    lost = data["lost"]
    if not isinstance(data.get("version"), int) or data["version"] > MANIFEST_VERSION:
        raise HearthError(
            f"The backup {folder} was written by a newer version of Hearth; update Hearth to restore it."
        )
    return frozenset(str(entry.get("sha256")) for entry in lost if isinstance(entry, dict))


def _write_manifest(folder: Path, lost: Iterable[BackupFile]) -> None:
    data = {
        "format": MANIFEST_FORMAT,
        "version": MANIFEST_VERSION,
        "created_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "database": DATABASE_NAME,
        "lost": [{"sha256": f.sha256, "name": f.name} for f in lost],
    }
    with open(folder / MANIFEST_NAME, "x", encoding="utf-8", opener=private_opener) as out:
        json.dump(data, out, indent=2, ensure_ascii=False)
        out.write("\n")
        out.flush()
        os.fsync(out.fileno())


def _copy_database(source: Path, destination: Path, *, what: str) -> None:
    try:
        verdict = copy_verified(source, destination)
    except (OSError, sqlite3.Error) as exc:
        destination.unlink(missing_ok=True)
        code = getattr(exc, "sqlite_errorcode", None)
        if getattr(exc, "errno", None) == errno.ENOSPC or (
            isinstance(code, int) and code & 0xFF == sqlite3.SQLITE_FULL
        ):
            raise HearthError(
                f"Not enough disk space in {destination.parent} for {_lower(what)}; nothing was changed."
            ) from exc
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


def _estimate(database: Path, store: FileStore) -> int:
    """The space a backup of `database` and its files takes (all the stored files, if it cannot say which)."""
    try:
        _revision, listed = _read_database(database)
        sizes = [f.size_bytes for f in listed if store.has(f.sha256)]
    except (sqlite3.DatabaseError, HearthError):
        sizes = [p.stat().st_size for p in store.stored()]
    return _database_bytes(database) + sum(size + _BLOCK_BYTES for size in sizes)


def _database_bytes(database: Path) -> int:
    return sum(Path(f"{database}{s}").stat().st_size for s in ("", "-wal") if Path(f"{database}{s}").exists())


def _require_space(folder: Path, needed: int, what: str, consequence: str) -> None:
    free = shutil.disk_usage(_existing(folder)).free
    if needed > free:
        raise HearthError(
            f"Not enough disk space in {folder} for {_lower(what)}: it needs {_megabytes(needed)} and "
            f"{_megabytes(free)} is free; {consequence}."
        )


def _existing(folder: Path) -> Path:
    while not folder.exists() and folder.parent != folder:
        folder = folder.parent
    return folder


def _folder_name(reason: str) -> str:
    return backup_name(reason).removesuffix(_DATABASE_ONLY_SUFFIX)


def _lower(what: str) -> str:
    return what[:1].lower() + what[1:]


def _megabytes(n: int) -> str:
    return f"{n / 1_000_000:,.1f} MB"


def _check_in_place(path: Path) -> str:
    try:
        return check_file(path, thorough=True)
    except sqlite3.Error as exc:
        # Not even readable: it is moved aside like a damaged one, and the backup takes its place.
        return str(exc)


def _checkpoint_and_close(path: Path) -> None:
    """Fold the WAL into the file so that renaming another file over it cannot pair it with a stale WAL."""
    with closing(sqlite3.connect(path, timeout=BUSY_TIMEOUT_MS / 1000)) as conn:
        busy, _frames, _done = conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()
        if busy:
            raise HearthError(f"{path} is in use by another program; close it, then restore.")
        conn.execute("PRAGMA journal_mode=DELETE")
    for suffix in _SIDE_FILES:
        Path(f"{path}{suffix}").unlink(missing_ok=True)
