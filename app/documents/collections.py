"""Collections: named sets of files and folders (recursive) whose passages answer questions.

Files are indexed where they are, never copied: a folder of large PDFs copied into the Hearth home would
double the space it takes, and GPT4All's LocalDocs and AnythingLLM do not copy either. A source opens
the original.

The store only records what is there and how far indexing has got. Reading a file, chunking it and
embedding it is the indexing loop's work (extract -> chunk -> embed -> ChunkIndex.add_chunks); it reports
each file back through `IndexingTarget`, which CollectionStore implements:

    plan = store.scan(name)
    for found in plan.to_index:
        try:
            ... extract, chunk, embed, index.add_chunks(sha, chunks, vectors, model)
        except DocumentError as exc:
            store.mark_failed(name, found.path, str(exc))
        else:
            store.mark_indexed(name, found.path, sha, found.size_bytes, found.mtime_ns)

Every call is its own short transaction, so the window and a `hearth docs` command can work on the same
collections at once.
"""

from __future__ import annotations

import builtins
import json
import os
import stat
import sys
import unicodedata
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path, PurePath
from typing import Final, Protocol

from sqlalchemy import delete, func, select, text
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from app.attachments.files import FileStore
from app.documents.index import ChunkIndex
from app.errors import HearthError
from app.storage.db import Database
from app.storage.orm import (
    COLLECTION_FILE_STATUSES,
    CollectionFileRow,
    CollectionRootRow,
    CollectionRow,
)

MAX_NAME_CHARS = 100
# A failure is shown in a list of files: its first line, cut to this.
MAX_ERROR_CHARS = 500
# Bidirectional overrides and isolates make a name print differently from what it is.
_BIDI_CONTROLS = frozenset("\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069")
_FORBIDDEN_CATEGORIES = frozenset({"Cc", "Cs", "Zl", "Zp"})

PathLike = str | os.PathLike[str]


class CollectionError(HearthError):
    pass


class CollectionNotFound(CollectionError):
    pass


class CollectionExists(CollectionError):
    pass


class IndexingTarget(Protocol):
    """Where the indexing loop reports each file it has dealt with (CollectionStore)."""

    def mark_indexed(self, name: str, path: PathLike, content_sha256: str, size: int, mtime_ns: int) -> None:
        """The file's passages are stored (ChunkIndex.add_chunks) for `content_sha256`, the SHA-256 of
        the bytes that were read, which had `size` and `mtime_ns` when reading began."""

    def mark_failed(self, name: str, path: PathLike, error: str) -> None:
        """The file could not be indexed: `error` says why, in one line a user can act on."""


@dataclass(frozen=True)
class Collection:
    id: int
    name: str
    roots: tuple[str, ...]
    created_at: datetime
    updated_at: datetime
    embedding_model: str | None


@dataclass(frozen=True)
class FileCounts:
    pending: int = 0
    indexed: int = 0
    changed: int = 0
    failed: int = 0
    missing: int = 0

    @property
    def total(self) -> int:
        return self.pending + self.indexed + self.changed + self.failed + self.missing


@dataclass(frozen=True)
class CollectionSummary:
    id: int
    name: str
    roots: tuple[str, ...]
    files: FileCounts
    chunks: int  # passages stored for the collection's files
    size_bytes: int  # of the files that are there (not missing)
    updated_at: datetime
    embedding_model: str | None


@dataclass(frozen=True)
class CollectionFile:
    path: str
    size_bytes: int
    mtime_ns: int
    content_sha256: str | None
    status: str
    error: str | None
    indexed_at: datetime | None


@dataclass(frozen=True)
class FoundFile:
    path: str
    size_bytes: int
    mtime_ns: int


@dataclass(frozen=True)
class ScanPlan:
    """What a scan found, against what was indexed. `new` and `changed` are what is left to index."""

    name: str
    new: tuple[FoundFile, ...]  # never indexed (found for the first time, or indexing never finished)
    changed: tuple[FoundFile, ...]  # size or modification time differ from what was indexed
    missing: tuple[str, ...]  # indexed before, not there now (marked 'missing')
    unchanged: tuple[FoundFile, ...]  # indexed, or failed and not changed since: left alone
    problems: tuple[str, ...] = field(default=())  # folders that could not be read, loops skipped

    @property
    def to_index(self) -> tuple[FoundFile, ...]:
        return self.new + self.changed


def validate_name(name: str) -> str:
    """The name with surrounding whitespace removed; CollectionError if it cannot be a collection's."""
    cleaned = name.strip()
    if not cleaned:
        raise CollectionError("A collection needs a name.")
    if len(cleaned) > MAX_NAME_CHARS:
        raise CollectionError(
            f"A collection name can be at most {MAX_NAME_CHARS} characters; this one has {len(cleaned)}."
        )
    for char in cleaned:
        if unicodedata.category(char) in _FORBIDDEN_CATEGORIES or char in _BIDI_CONTROLS:
            raise CollectionError(
                f"A collection name cannot contain control characters (found U+{ord(char):04X})."
            )
    return cleaned


def _absolute(path: PathLike) -> str:
    """The path as stored: absolute and normalised, with symbolic links kept (the user's own path)."""
    return os.path.normpath(Path(path).expanduser().absolute())


def _existing(path: PathLike) -> str:
    absolute = _absolute(path)
    try:
        mode = Path(absolute).stat().st_mode
    except FileNotFoundError:
        raise CollectionError(f"No such file or folder: {absolute}") from None
    except OSError as exc:
        raise CollectionError(f"Cannot read {absolute}: {exc.strerror or exc}") from None
    if not (stat.S_ISREG(mode) or stat.S_ISDIR(mode)):
        raise CollectionError(f"{absolute} is neither a file nor a folder.")
    needed = os.R_OK | (os.X_OK if stat.S_ISDIR(mode) else 0)
    if not os.access(absolute, needed):
        raise CollectionError(f"Cannot read {absolute}: permission denied")
    return absolute


# Vim's swap files, and what browsers and copy tools write before renaming to the real name.
_LEFTOVER_SUFFIXES: Final = frozenset({".swp", ".swo", ".swx", ".tmp", ".part", ".partial", ".crdownload"})
# Windows Explorer's own files, which are not hidden on other systems (and desktop.ini ends in .ini).
_SYSTEM_NAMES: Final = frozenset({"desktop.ini", "thumbs.db"})


def leftover_name(name: str) -> bool:
    """Whether a file name is an editor's temporary, lock or backup file, or a download not finished:
    Office's `~$report.docx` and `~WRL0001.tmp`, Emacs' `.#notes.md`, `#notes.md#` and `notes.md~`,
    Vim's `.notes.md.swp`, a browser's `paper.pdf.crdownload`."""
    lowered = name.lower()
    return (
        lowered.startswith(("~", ".#"))
        or lowered.endswith("~")
        or (len(lowered) > 1 and lowered.startswith("#") and lowered.endswith("#"))
        or PurePath(lowered).suffix in _LEFTOVER_SUFFIXES
        or lowered in _SYSTEM_NAMES
    )


def _hidden(entry: os.DirEntry[str]) -> bool:
    if entry.name.startswith("."):
        return True
    if sys.platform != "win32":
        return False
    # Windows marks hidden files with an attribute instead of a leading dot.
    return bool(entry.stat(follow_symlinks=False).st_file_attributes & stat.FILE_ATTRIBUTE_HIDDEN)


def _now() -> datetime:
    return datetime.now(UTC)


def _one_line(error: str) -> str:
    line = " ".join(error.split())
    return line if len(line) <= MAX_ERROR_CHARS else line[: MAX_ERROR_CHARS - 1] + "…"


class CollectionStore:
    """Collections in the app's database. Sync and Qt-free; safe to use from several threads.

    `accepts` says which files found in a folder are worth indexing (by default every file that is not
    hidden); files added by name are always taken, so an unsupported one fails with its reason.
    `files` is where stored files live (<home>/attachments): a stored file that removing a
    collection leaves unused is deleted there too.
    """

    def __init__(
        self,
        db: Database,
        index: ChunkIndex,
        *,
        accepts: Callable[[Path], bool] | None = None,
        files: FileStore | None = None,
    ) -> None:
        self._db = db
        self._index = index
        self._accepts = accepts or (lambda _path: True)
        self._files = files

    # Collections -----------------------------------------------------------------------------------------

    def create(self, name: str, paths: Sequence[PathLike]) -> Collection:
        name = validate_name(name)
        roots = list(dict.fromkeys(_existing(path) for path in paths))
        now = _now()
        try:
            with self._db.session() as session:
                row = CollectionRow(name=name, created_at=now, updated_at=now)
                session.add(row)
                session.flush()
                session.add_all(CollectionRootRow(collection_id=row.id, path=root) for root in roots)
                session.flush()
                return self._collection(session, row)
        except IntegrityError:
            raise CollectionExists(f"A collection named {name!r} already exists.") from None

    def get(self, name: str) -> Collection:
        with self._db.read_session() as session:
            return self._collection(session, self._row(session, name))

    def list(self) -> list[CollectionSummary]:
        """Every collection, by name."""
        with self._db.read_session() as session:
            rows = session.scalars(select(CollectionRow).order_by(CollectionRow.name)).all()
            roots = self._roots(session, [row.id for row in rows])
            counts: dict[int, dict[str, int]] = {}
            sizes: dict[int, int] = {}
            for collection_id, status, files, size in session.execute(
                select(
                    CollectionFileRow.collection_id,
                    CollectionFileRow.status,
                    func.count(),
                    func.coalesce(func.sum(CollectionFileRow.size_bytes), 0),
                ).group_by(CollectionFileRow.collection_id, CollectionFileRow.status)
            ):
                counts.setdefault(collection_id, {})[status] = files
                if status != "missing":
                    sizes[collection_id] = sizes.get(collection_id, 0) + size
            chunks: dict[int, int] = {
                collection_id: count
                for collection_id, count in session.execute(
                    text(
                        "SELECT f.collection_id, count(*) FROM "
                        "(SELECT DISTINCT collection_id, content_sha256 FROM collection_files "
                        " WHERE content_sha256 IS NOT NULL) AS f "
                        "JOIN document_chunks AS c ON c.content_sha256 = f.content_sha256 "
                        "GROUP BY f.collection_id"
                    )
                )
            }
            return [
                CollectionSummary(
                    row.id,
                    row.name,
                    roots.get(row.id, ()),
                    FileCounts(**counts.get(row.id, {})),
                    chunks.get(row.id, 0),
                    sizes.get(row.id, 0),
                    row.updated_at,
                    row.embedding_model,
                )
                for row in rows
            ]

    def roots(self) -> dict[str, tuple[str, ...]]:
        """Every collection's files and folders by its name: what a folder watcher follows, without the
        counting `list` does."""
        with self._db.read_session() as session:
            rows = session.execute(select(CollectionRow.id, CollectionRow.name)).all()
            roots = self._roots(session, [row.id for row in rows])
            return {row.name: roots.get(row.id, ()) for row in rows}

    def files(self, name: str) -> builtins.list[CollectionFile]:
        """The collection's files as last scanned or indexed, by path."""
        with self._db.read_session() as session:
            row = self._row(session, name)
            return [
                CollectionFile(
                    f.path, f.size_bytes, f.mtime_ns, f.content_sha256, f.status, f.error, f.indexed_at
                )
                for f in session.scalars(
                    select(CollectionFileRow)
                    .where(CollectionFileRow.collection_id == row.id)
                    .order_by(CollectionFileRow.path)
                )
            ]

    def passages(self, name: str) -> dict[str, int]:
        """How many passages are stored for each of the collection's files that has some, by path."""
        with self._db.read_session() as session:
            row = self._row(session, name)
            return {
                str(path): int(count)
                for path, count in session.execute(
                    text(
                        "SELECT f.path, count(*) FROM collection_files AS f "
                        "JOIN document_chunks AS c ON c.content_sha256 = f.content_sha256 "
                        "WHERE f.collection_id = :id GROUP BY f.id"
                    ),
                    {"id": row.id},
                )
            }

    def add_paths(self, name: str, paths: Sequence[PathLike]) -> Collection:
        """Add files or folders; ones already in the collection are left as they are."""
        roots = list(dict.fromkeys(_existing(path) for path in paths))
        with self._db.session() as session:
            row = self._row(session, name)
            known = set(self._roots(session, [row.id]).get(row.id, ()))
            added = [root for root in roots if root not in known]
            session.add_all(CollectionRootRow(collection_id=row.id, path=root) for root in added)
            if added:
                row.updated_at = _now()
            session.flush()
            return self._collection(session, row)

    def remove(self, name: str) -> None:
        """Delete the collection, and the passages and stored files nothing else uses, leaving none of
        their text on disk. The user's own files are not touched."""
        with self._db.session() as session:
            row = self._row(session, name)
            collection_id = row.id
            held = self._contents(session, row.id)
            session.delete(row)
            session.flush()
            orphans = self._release(session, held)
        self._index.forget_collection(collection_id)
        self._after_release(orphans)

    def remove_paths(self, name: str, paths: Sequence[PathLike]) -> Collection:
        """Take files or folders out of the collection (those added, by the same path), with the files
        found under them that no remaining root covers."""
        wanted = list(dict.fromkeys(_absolute(path) for path in paths))
        with self._db.session() as session:
            row = self._row(session, name)
            roots = self._roots(session, [row.id]).get(row.id, ())
            unknown = [path for path in wanted if path not in roots]
            if unknown:
                listed = ", ".join(roots) or "none"
                raise CollectionError(
                    f"{unknown[0]} is not one of the paths of collection {row.name!r} (they are: {listed})."
                )
            remaining = [root for root in roots if root not in wanted]
            session.execute(
                delete(CollectionRootRow).where(
                    CollectionRootRow.collection_id == row.id, CollectionRootRow.path.in_(wanted)
                )
            )
            dropped = [
                (file.id, file.content_sha256)
                for file in session.execute(
                    select(
                        CollectionFileRow.id, CollectionFileRow.path, CollectionFileRow.content_sha256
                    ).where(CollectionFileRow.collection_id == row.id)
                )
                if not any(_covers(root, file.path) for root in remaining)
            ]
            session.execute(
                delete(CollectionFileRow).where(CollectionFileRow.id.in_([i for i, _ in dropped]))
            )
            row.updated_at = _now()
            orphans = self._release(session, {sha for _, sha in dropped if sha is not None})
            collection = self._collection(session, row)
        self._after_release(orphans)
        return collection

    # Scanning and indexing ------------------------------------------------------------------------------

    def scan(self, name: str) -> ScanPlan:
        """Walk the collection's roots and compare what is there with what was indexed (by size and
        modification time). New files are recorded as 'pending', changed ones as 'changed', and files
        no longer there as 'missing' (their passages are kept, unsearched, in case they come back)."""
        collection = self.get(name)
        found: dict[str, FoundFile] = {}
        problems: list[str] = []
        for root in collection.roots:
            for item in self._walk(root, problems):
                found.setdefault(item.path, item)
        new: list[FoundFile] = []
        changed: list[FoundFile] = []
        unchanged: list[FoundFile] = []
        missing: list[str] = []
        with self._db.session() as session:
            row = self._row(session, name)
            known = {
                file.path: file
                for file in session.scalars(
                    select(CollectionFileRow).where(CollectionFileRow.collection_id == row.id)
                )
            }
            for path, item in found.items():
                file = known.get(path)
                if file is None:
                    session.add(
                        CollectionFileRow(
                            collection_id=row.id,
                            path=path,
                            size_bytes=item.size_bytes,
                            mtime_ns=item.mtime_ns,
                            status="pending",
                        )
                    )
                    new.append(item)
                    continue
                same = (file.size_bytes, file.mtime_ns) == (item.size_bytes, item.mtime_ns)
                if same and file.status == "missing":
                    # Back where it was, as it was.
                    file.status = "indexed" if file.content_sha256 else "pending"
                if same and file.status in ("indexed", "failed"):
                    unchanged.append(item)
                elif same and file.status == "pending":
                    new.append(item)
                else:
                    (changed if file.content_sha256 else new).append(item)
                    file.status = "changed" if file.content_sha256 else "pending"
                    file.size_bytes, file.mtime_ns, file.error = item.size_bytes, item.mtime_ns, None
            for path, file in known.items():
                if path not in found and file.status != "missing":
                    file.status = "missing"
                    missing.append(path)
            if new or changed or missing:
                row.updated_at = _now()
        self._index.invalidate()
        return ScanPlan(
            collection.name, tuple(new), tuple(changed), tuple(missing), tuple(unchanged), tuple(problems)
        )

    def mark_indexed(self, name: str, path: PathLike, content_sha256: str, size: int, mtime_ns: int) -> None:
        path = _absolute(path)
        with self._db.session() as session:
            row = self._row(session, name)
            models = (
                session.execute(
                    text("SELECT DISTINCT embedding_model FROM document_chunks WHERE content_sha256 = :sha"),
                    {"sha": content_sha256},
                )
                .scalars()
                .all()
            )
            if not models:
                # Passages nothing referred to yet may have been removed meanwhile (remove_unreferenced).
                raise CollectionError(
                    f"No passages are stored for {path} ({content_sha256}); index it again."
                )
            file = self._file(session, row, path, size, mtime_ns)
            previous = file.content_sha256
            file.content_sha256, file.size_bytes, file.mtime_ns = content_sha256, size, mtime_ns
            file.status, file.error, file.indexed_at = "indexed", None, _now()
            row.updated_at = _now()
            if len(models) == 1 and models[0] is not None:
                row.embedding_model = models[0]
            session.flush()
            if previous is not None and previous != content_sha256:
                self._index.delete_unreferenced(session, [previous])
        self._index.invalidate()

    def mark_failed(self, name: str, path: PathLike, error: str) -> None:
        """Also drops the passages of what the file held before: they no longer say what it says."""
        path = _absolute(path)
        with self._db.session() as session:
            row = self._row(session, name)
            file = self._file(session, row, path, None, None)
            previous = file.content_sha256
            file.content_sha256, file.status, file.error = None, "failed", _one_line(error)
            row.updated_at = _now()
            session.flush()
            if previous is not None:
                self._index.delete_unreferenced(session, [previous])
        self._index.invalidate()

    # Helpers ---------------------------------------------------------------------------------------------

    def _walk(self, root: str, problems: builtins.list[str]) -> Iterator[FoundFile]:
        try:
            info = Path(root).stat()
        except OSError as exc:
            problems.append(f"{root}: {exc.strerror or exc}")
            return
        if stat.S_ISREG(info.st_mode):
            yield FoundFile(root, info.st_size, info.st_mtime_ns)
            return
        # Folders by identity: a symbolic link back up the tree (or two links to one folder) is walked once.
        seen = {(info.st_dev, info.st_ino)}
        pending = [root]
        while pending:
            folder = pending.pop()
            try:
                with os.scandir(folder) as entries:
                    listed = sorted(entries, key=lambda entry: entry.name)
            except OSError as exc:
                problems.append(f"{folder}: {exc.strerror or exc}")
                continue
            for entry in listed:
                try:
                    # An editor's lock or temporary file would fail to index and be gone by the next scan.
                    if _hidden(entry) or (not entry.is_dir() and leftover_name(entry.name)):
                        continue
                    if entry.is_dir():
                        target = entry.stat()
                        if (target.st_dev, target.st_ino) in seen:
                            problems.append(f"{entry.path}: already walked (a link to a folder seen before)")
                            continue
                        seen.add((target.st_dev, target.st_ino))
                        pending.append(entry.path)
                    elif entry.is_file():
                        if self._accepts(Path(entry.path)):
                            target = entry.stat()
                            yield FoundFile(entry.path, target.st_size, target.st_mtime_ns)
                    elif entry.is_symlink():
                        problems.append(f"{entry.path}: a link to nothing that can be read")
                except OSError as exc:  # a dangling link, or gone since the listing
                    problems.append(f"{entry.path}: {exc.strerror or exc}")

    @staticmethod
    def _row(session: Session, name: str) -> CollectionRow:
        row = session.scalars(select(CollectionRow).where(CollectionRow.name == name.strip())).one_or_none()
        if row is None:
            raise CollectionNotFound(f"No collection named {name.strip()!r}.")
        return row

    @staticmethod
    def _roots(session: Session, ids: Sequence[int]) -> dict[int, tuple[str, ...]]:
        roots: dict[int, list[str]] = {}
        for collection_id, path in session.execute(
            select(CollectionRootRow.collection_id, CollectionRootRow.path)
            .where(CollectionRootRow.collection_id.in_(ids))
            .order_by(CollectionRootRow.id)
        ):
            roots.setdefault(collection_id, []).append(path)
        return {key: tuple(value) for key, value in roots.items()}

    def _collection(self, session: Session, row: CollectionRow) -> Collection:
        return Collection(
            row.id,
            row.name,
            self._roots(session, [row.id]).get(row.id, ()),
            row.created_at,
            row.updated_at,
            row.embedding_model,
        )

    @staticmethod
    def _contents(session: Session, collection_id: int) -> set[str]:
        return set(
            session.scalars(
                select(CollectionFileRow.content_sha256).where(
                    CollectionFileRow.collection_id == collection_id,
                    CollectionFileRow.content_sha256.is_not(None),
                )
            )
        )

    def _file(
        self, session: Session, row: CollectionRow, path: str, size: int | None, mtime_ns: int | None
    ) -> CollectionFileRow:
        """The collection's row for `path`, created if the loop reports a file no scan recorded; a
        CollectionError if no path of the collection covers it (one removed while indexing ran)."""
        file = session.scalars(
            select(CollectionFileRow).where(
                CollectionFileRow.collection_id == row.id, CollectionFileRow.path == path
            )
        ).one_or_none()
        if file is None:
            roots = self._roots(session, [row.id]).get(row.id, ())
            if not any(_covers(root, path) for root in roots):
                raise CollectionError(f"{path} is not in collection {row.name!r}.")
            if size is None or mtime_ns is None:
                try:
                    info = Path(path).stat()
                    size, mtime_ns = info.st_size, info.st_mtime_ns
                except OSError:
                    size, mtime_ns = 0, 0
            file = CollectionFileRow(
                collection_id=row.id, path=path, size_bytes=size, mtime_ns=mtime_ns, status="pending"
            )
            session.add(file)
        return file

    def release_unreferenced(self) -> None:
        """Delete every passage, extracted text and stored file that no message and no collection uses
        (after conversations were deleted; at start, files attached to a message never sent). Files the
        store has pinned (waiting to be sent) keep their row, text and bytes."""
        with self._db.session() as session:
            orphans = self._release(session, None)
        self._after_release(orphans)

    def _release(self, session: Session, contents: set[str] | None) -> builtins.list[str]:
        """After references went: delete the passages, extracted texts and stored-file rows of `contents`
        (None: of everything) that nothing uses now, and compact the full-text index. Returns the stored
        files to delete from disk."""
        if contents is not None and not contents:
            return []
        removed = self._index.delete_unreferenced(session, contents)
        # Read inside the write transaction (begun by the statement above): a file pinned before its row was
        # committed is in this set whenever this transaction can see the row.
        pinned = self._files.pinned() if self._files is not None else frozenset()
        unused = (
            "NOT EXISTS (SELECT 1 FROM message_parts WHERE file_sha256 = {sha}) "
            "AND NOT EXISTS (SELECT 1 FROM collection_files WHERE content_sha256 = {sha}) "
            "AND {sha} NOT IN (SELECT value FROM json_each(:pinned))"
        )
        among = "" if contents is None else "{sha} IN (SELECT value FROM json_each(:shas)) AND "
        params = {"pinned": json.dumps(sorted(pinned))}
        if contents is not None:
            params["shas"] = json.dumps(sorted(contents))
        files_query = f"SELECT sha256 FROM files WHERE {among}{unused}".replace("{sha}", "files.sha256")
        orphans = list(session.execute(text(files_query), params).scalars())
        texts_query = f"DELETE FROM document_texts WHERE {among}{unused}".replace(
            "{sha}", "document_texts.content_sha256"
        )
        session.execute(text(texts_query), params)
        if orphans:
            session.execute(
                text("DELETE FROM files WHERE sha256 IN (SELECT value FROM json_each(:orphans))"),
                {"orphans": json.dumps(orphans)},
            )
        if removed:
            self._index.compact(session)
        return orphans

    def _after_release(self, orphans: Sequence[str]) -> None:
        self._index.invalidate()
        if self._files is not None:
            for sha in orphans:
                self._files.delete(sha)
        # The WAL still holds the deleted pages until it is folded into the file and truncated.
        self._db.checkpoint()


def _covers(root: str, path: str) -> bool:
    return path == root or path.startswith(root.rstrip(os.sep) + os.sep)


__all__ = [
    "COLLECTION_FILE_STATUSES",
    "Collection",
    "CollectionError",
    "CollectionExists",
    "CollectionFile",
    "CollectionNotFound",
    "CollectionStore",
    "CollectionSummary",
    "FileCounts",
    "FoundFile",
    "IndexingTarget",
    "ScanPlan",
    "validate_name",
]
