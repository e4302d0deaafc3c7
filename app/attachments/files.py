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
import uuid
from collections.abc import Callable
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

    def path(self, sha256: str) -> Path:
        if not _SHA256.fullmatch(sha256):
            raise ValueError(f"not a SHA-256 digest: {sha256!r}")
        return self.root / sha256[:2] / sha256

    def has(self, sha256: str) -> bool:
        return self.path(sha256).is_file()

    def put_file(self, source: Path, *, max_bytes: int | None = None) -> StoredFile:
        """Copy `source` in, hashing while copying. Raises HearthError naming the file when it cannot be
        read, is larger than `max_bytes`, or the disk fills up; nothing is left behind then."""
        try:
            with source.open("rb") as reader:
                return self.put_stream(reader, source.name, max_bytes=max_bytes)
        except FileNotFoundError:
            raise HearthError(f"{source} does not exist.") from None
        except IsADirectoryError:
            raise HearthError(f"{source} is a folder, not a file.") from None
        except PermissionError:
            raise HearthError(f"{source} cannot be read: permission denied.") from None

    def put_bytes(self, data: bytes, name: str) -> StoredFile:
        """Bytes that are already in memory (an import, a pasted file)."""
        return self.put_stream(io.BytesIO(data), name)

    def put_stream(self, reader: BinaryIO, name: str, *, max_bytes: int | None = None) -> StoredFile:
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

        temporary = self.root / f".incoming-{uuid.uuid4().hex}"
        try:
            self._write(temporary, copy, name)
            target = self.path(digest.hexdigest())
            if target.is_file():
                temporary.unlink()
            else:
                make_private_dir(target.parent)
                temporary.replace(target)
                fsync_directory(target.parent)
        finally:
            temporary.unlink(missing_ok=True)
        return StoredFile(digest.hexdigest(), size, target)

    def delete(self, sha256: str) -> None:
        """Overwrite the bytes with zeros, then remove the file. On SSDs and copy-on-write file systems the
        old blocks may survive the overwrite; the database's secure_delete has the same limit."""
        target = self.path(sha256)
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

    @staticmethod
    def _write(temporary: Path, write: Callable[[BinaryIO], object], name: str) -> None:
        try:
            with open(temporary, "xb", opener=private_opener) as out:
                write(out)
                out.flush()
                os.fsync(out.fileno())
        except OSError as exc:
            if exc.errno == errno.ENOSPC:
                raise HearthError(f"Not enough disk space to keep {name}; nothing was attached.") from exc
            raise


def _megabytes(n: int) -> str:
    return f"{n / 1_000_000:,.0f} MB"
