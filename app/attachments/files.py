"""The content-addressed file store: `<home>/attachments/ab/<sha256>`.

A conversation keeps working when the original file moves or is deleted, a file attached twice is stored once,
and the bytes go (overwritten first) when the last message that holds them goes. Which messages hold a file
is the database's business (`files` and `message_parts`); this module only keeps bytes.
"""

from __future__ import annotations

import errno
import hashlib
import io
import os
import re
import threading
import uuid
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO, Final

from app.errors import HearthError
from app.fsutil import fsync_directory, make_private_dir, private_opener

CHUNK_BYTES: Final = 1 << 20
_SHA256 = re.compile(r"[0-9a-f]{64}")


@dataclass(frozen=True)
class StoredFile:
    sha256: str
    size_bytes: int
    path: Path


class FileStore:
    def __init__(self, root: Path) -> None:
        self.root = root
        # Files attached to a message that is not sent yet: nothing in the database holds them, so the release
        # of unreferenced files (run whenever a conversation goes) would take them. Kept in memory, so a
        # process that ends lets go of its own, and the next start deletes what was never sent.
        self._pinned: set[str] = set()
        # Pinning a file and deleting it exclude each other, so bytes just pinned are never overwritten.
        self._lock = threading.Lock()

    def path(self, sha256: str) -> Path:
        if not _SHA256.fullmatch(sha256):
            raise ValueError(f"not a SHA-256 digest: {sha256!r}")
        return self.root / sha256[:2] / sha256

    def has(self, sha256: str) -> bool:
        return self.path(sha256).is_file()

    def stored(self) -> Iterator[Path]:
        """Every stored file (not those still being written in)."""
        if not self.root.is_dir():
            return
        for folder in sorted(self.root.iterdir()):
            if folder.is_dir() and len(folder.name) == 2:
                for path in sorted(folder.iterdir()):
                    if is_sha256(path.name) and path.name.startswith(folder.name) and path.is_file():
                        yield path

    def pinned(self) -> frozenset[str]:
        with self._lock:
            return frozenset(self._pinned)

    def unpin(self, sha256s: Iterable[str]) -> None:
        """A message holds these files now, or they were taken off the one being written."""
        with self._lock:
            self._pinned.difference_update(sha256s)

    def put_file(self, source: Path, *, max_bytes: int | None = None, pin: bool = False) -> StoredFile:
        """Copy `source` in, hashing while copying. Raises HearthError naming the file when it cannot be
        read, is larger than `max_bytes`, or the disk fills up; nothing is left behind then. With `pin`, the
        file stays (`delete` leaves it) until `unpin`."""
        try:
            with source.open("rb") as reader:
                return self.put_stream(reader, source.name, max_bytes=max_bytes, pin=pin)
        except FileNotFoundError:
            raise HearthError(f"{source} does not exist.") from None
        except IsADirectoryError:
            raise HearthError(f"{source} is a folder, not a file.") from None
        except PermissionError:
            raise HearthError(f"{source} cannot be read: permission denied.") from None

    def put_bytes(self, data: bytes, name: str, *, pin: bool = False) -> StoredFile:
        """Bytes that are already in memory (an import, a pasted file)."""
        return self.put_stream(io.BytesIO(data), name, pin=pin)

    def put_stream(
        self, reader: BinaryIO, name: str, *, max_bytes: int | None = None, pin: bool = False
    ) -> StoredFile:
        make_private_dir(self.root)
        digest = hashlib.sha256()
        size = 0

        def copy(out: BinaryIO) -> None:
            nonlocal size
            while chunk := reader.read(CHUNK_BYTES):
                size += len(chunk)
                if max_bytes is not None and size > max_bytes:
                    raise HearthError(f"{name} is larger than the limit of {_megabytes(max_bytes)}.")
                digest.update(chunk)
                out.write(chunk)

        temporary = self._temporary()
        try:
            try:
                _write_synced(temporary, copy)
            except OSError as exc:
                if exc.errno == errno.ENOSPC:
                    raise HearthError(f"Not enough disk space to keep {name}; nothing was attached.") from exc
                raise
            target = self._move_in(temporary, digest.hexdigest(), pin=pin)
        finally:
            temporary.unlink(missing_ok=True)
        return StoredFile(digest.hexdigest(), size, target)

    def put_copy(self, source: Path, sha256: str) -> None:
        """Copy in a file that must have this SHA-256 (a backup's, when it is restored), checking it as it is
        written. Raises FileMismatch when it does not (nothing is kept), OSError when it cannot be read or
        written (a full disk)."""
        make_private_dir(self.root)
        temporary = self._temporary()
        try:
            if not copy_checked(source, temporary, sha256):
                raise FileMismatch(sha256)
            self._move_in(temporary, sha256, pin=False)
        finally:
            temporary.unlink(missing_ok=True)

    def _temporary(self) -> Path:
        return self.root / f".incoming-{uuid.uuid4().hex}"

    def _move_in(self, temporary: Path, sha256: str, *, pin: bool) -> Path:
        target = self.path(sha256)
        with self._lock:
            if pin:
                self._pinned.add(sha256)
            if target.is_file():
                temporary.unlink()
            else:
                make_private_dir(target.parent)
                temporary.replace(target)
                fsync_directory(target.parent)
        return target

    def delete(self, sha256: str) -> None:
        """Overwrite the bytes with zeros, then remove the file. On SSDs and copy-on-write file systems the
        old blocks may survive the overwrite; the database's secure_delete has the same limit. A pinned
        file is left as it is: it was attached again while its last holder went."""
        target = self.path(sha256)
        with self._lock:
            if sha256 not in self._pinned:
                _overwrite_and_remove(target)


class FileMismatch(HearthError):
    """A copy whose bytes do not have the SHA-256 they were copied as."""

    def __init__(self, sha256: str) -> None:
        super().__init__(f"The file {sha256} does not match its SHA-256.")
        self.sha256 = sha256


def copy_checked(source: Path, target: Path, sha256: str) -> bool:
    """Copy `source` to the new file `target` (owner-only, synced to disk), hashing the bytes as they are
    written; True when they have this SHA-256. A copy that does not match is removed again. Raises OSError
    (FileNotFoundError when `source` is not there, ENOSPC when the disk fills up); nothing is left then."""
    digest = hashlib.sha256()
    with source.open("rb") as reader:
        created = False
        try:
            with open(target, "xb", opener=private_opener) as out:
                created = True
                while chunk := reader.read(CHUNK_BYTES):
                    digest.update(chunk)
                    out.write(chunk)
                out.flush()
                os.fsync(out.fileno())
        except BaseException:
            if created:
                target.unlink(missing_ok=True)
            raise
    if digest.hexdigest() != sha256:
        target.unlink()
        return False
    return True


def is_sha256(text: str) -> bool:
    return _SHA256.fullmatch(text) is not None


def file_sha256(path: Path) -> str:
    with path.open("rb") as reader:
        return hashlib.file_digest(reader, "sha256").hexdigest()


def _write_synced(path: Path, write: Callable[[BinaryIO], object]) -> None:
    with open(path, "xb", opener=private_opener) as out:
        write(out)
        out.flush()
        os.fsync(out.fileno())


def _overwrite_and_remove(target: Path) -> None:
    try:
        size = target.stat().st_size
        with target.open("r+b", buffering=0) as out:
            zeros = bytes(min(size, CHUNK_BYTES))
            left = size
            while left > 0:
                left -= out.write(zeros[: min(left, len(zeros))])
            os.fsync(out.fileno())
        target.unlink()
    except FileNotFoundError:
        return


def _megabytes(n: int) -> str:
    return f"{n / 1_000_000:,.0f} MB"
