"""The content-addressed file store with real files: dedupe, limits, unreadable sources, a full disk."""

from __future__ import annotations

import errno
import hashlib
from pathlib import Path
from typing import BinaryIO

import pytest

from app.attachments import files
from app.attachments.files import FileStore
from app.errors import HearthError


def leftovers(store: FileStore) -> list[Path]:
    return sorted(p for p in store.root.rglob("*") if p.is_file())


def test_a_file_attached_twice_is_stored_once_by_its_sha256(tmp_path: Path) -> None:
    store = FileStore(tmp_path / "attachments")
    data = "今天的会议纪要\nMeeting notes\n".encode() * 1000
    first, second = tmp_path / "a.txt", tmp_path / "b.txt"
    first.write_bytes(data)
    second.write_bytes(data)
    one, two = store.put_file(first), store.put_file(second)
    assert one == two
    assert one.sha256 == hashlib.sha256(data).hexdigest() and one.size_bytes == len(data)
    assert leftovers(store) == [store.root / one.sha256[:2] / one.sha256]
    assert store.put_bytes(data, "pasted.txt") == one
    first.unlink()
    assert one.path.read_bytes() == data  # the conversation survives the original going


def test_deleting_overwrites_then_removes(tmp_path: Path) -> None:
    store = FileStore(tmp_path / "attachments")
    stored = store.put_bytes(b"secret plans" * 100, "plans.txt")
    store.delete(stored.sha256)
    assert not store.has(stored.sha256) and leftovers(store) == []
    store.delete(stored.sha256)  # already gone: nothing to do


def test_a_file_over_the_limit_is_refused_and_nothing_is_kept(tmp_path: Path) -> None:
    store = FileStore(tmp_path / "attachments")
    big = tmp_path / "big.log"
    big.write_bytes(b"x" * (3 * files.CHUNK_BYTES))
    with pytest.raises(HearthError, match=r"big.log is larger than the limit of 2 MB"):
        store.put_file(big, max_bytes=2_000_000)
    assert leftovers(store) == []


def test_missing_paths_and_folders_are_clear_errors(tmp_path: Path) -> None:
    store = FileStore(tmp_path / "attachments")
    with pytest.raises(HearthError, match=r"nowhere.pdf does not exist"):
        store.put_file(tmp_path / "nowhere.pdf")
    with pytest.raises(HearthError, match=r"is a folder, not a file"):
        store.put_file(tmp_path)


def test_a_full_disk_leaves_no_partial_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    store = FileStore(tmp_path / "attachments")
    source = tmp_path / "report.txt"
    source.write_bytes(b"y" * (2 * files.CHUNK_BYTES))
    real_write = files._write_synced

    def fills_up(temporary: Path, write: object) -> None:
        def failing(out: BinaryIO) -> None:
            out.write(b"partial")
            raise OSError(errno.ENOSPC, "No space left on device")

        real_write(temporary, failing)

    monkeypatch.setattr(files, "_write_synced", fills_up)
    with pytest.raises(HearthError, match=r"Not enough disk space to keep report.txt; nothing was attached"):
        store.put_file(source)
    assert leftovers(store) == []


def test_only_digests_name_files(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="not a SHA-256"):
        FileStore(tmp_path).path("../../etc/passwd")
