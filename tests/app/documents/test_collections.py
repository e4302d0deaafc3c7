"""Collections: names, paths, scanning folders for new, changed and missing files, what removing leaves."""

from __future__ import annotations

import hashlib
import os
import sqlite3
from collections.abc import Callable
from contextlib import closing
from pathlib import Path
from typing import Any

import pytest

from app.attachments.files import FileStore
from app.documents.collections import (
    MAX_NAME_CHARS,
    CollectionError,
    CollectionExists,
    CollectionNotFound,
    CollectionStore,
    FileCounts,
    IndexingTarget,
    ScanPlan,
)
from app.documents.index import ChunkIndex, ChunkInput
from app.errors import HearthError
from app.storage.db import Database
from tests.helpers import embedder


@pytest.fixture
def collections(db: Database, index: ChunkIndex, tmp_path: Path) -> CollectionStore:
    return CollectionStore(db, index, files=FileStore(tmp_path / "home" / "attachments"))


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    """A folder of notes: two at the top, one in a subfolder, and hidden ones that must be skipped."""
    root = tmp_path / "notes"
    (root / "trips").mkdir(parents=True)
    (root / "garden.txt").write_text("Tomatoes need sun.\n\nWater the basil daily.")
    (root / "bread.md").write_text("Sourdough rises overnight.")
    (root / "trips" / "harbour.txt").write_text("The ferry leaves the harbour at nine.")
    (root / ".secret.txt").write_text("hidden file")
    (root / ".git").mkdir()
    (root / ".git" / "config").write_text("hidden folder")
    return root


def index_files(target: IndexingTarget, index: ChunkIndex, name: str, plan: ScanPlan) -> None:
    """The indexing loop, as the app will run it, with paragraphs for chunks and the plumbing-only test
    embedder; a file that is not UTF-8 text fails with its reason."""
    for found in plan.to_index:
        data = Path(found.path).read_bytes()
        try:
            paragraphs = [p for p in data.decode("utf-8").split("\n\n") if p.strip()]
        except UnicodeDecodeError:
            target.mark_failed(name, found.path, f"{Path(found.path).name} is not text")
            continue
        sha = hashlib.sha256(data).hexdigest()
        chunks = [ChunkInput(p, f"paragraph {i + 1}", i) for i, p in enumerate(paragraphs)]
        index.add_chunks(sha, chunks, embedder.embed(paragraphs), embedder.MODEL)
        target.mark_indexed(name, found.path, sha, found.size_bytes, found.mtime_ns)


def paths(files: Any) -> list[str]:
    return sorted(Path(f.path).name for f in files)


def statuses(collections: CollectionStore, name: str) -> dict[str, str]:
    return {Path(f.path).name: f.status for f in collections.files(name)}


def touch(path: Path, text: str) -> None:
    """Rewrite a file so that its size and modification time both change."""
    before = path.stat().st_mtime_ns
    path.write_text(text)
    os.utime(path, ns=(before + 5_000_000_000, before + 5_000_000_000))


# Names and paths -----------------------------------------------------------------------------------------


def test_a_collection_keeps_its_name_and_absolute_paths(
    collections: CollectionStore, folder: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(folder.parent)
    created = collections.create("  Notes  ", ["notes", folder / "bread.md"])
    assert created.name == "Notes"
    assert created.roots == (str(folder), str(folder / "bread.md"))
    assert collections.get("Notes") == created
    assert [summary.name for summary in collections.list()] == ["Notes"]


def test_errors_a_user_can_cause_say_what_is_wrong(collections: CollectionStore, folder: Path) -> None:
    collections.create("notes", [folder])
    cases: list[tuple[Callable[[], object], type[HearthError], str]] = [
        (
            lambda: collections.create("notes", []),
            CollectionExists,
            "A collection named 'notes' already exists",
        ),
        (lambda: collections.create("", []), CollectionError, "needs a name"),
        (lambda: collections.create("   ", []), CollectionError, "needs a name"),
        (
            lambda: collections.create("x" * (MAX_NAME_CHARS + 1), []),
            CollectionError,
            "at most 100 characters",
        ),
        (lambda: collections.create("two\nlines", []), CollectionError, "control characters .found U.000A"),
        (lambda: collections.create("bell\x07", []), CollectionError, "control characters"),
        (lambda: collections.create("evil\u202egnp.exe", []), CollectionError, "control characters"),
        (lambda: collections.get("nope"), CollectionNotFound, "No collection named 'nope'"),
        (lambda: collections.scan("nope"), CollectionNotFound, "No collection named 'nope'"),
        (lambda: collections.remove("nope"), CollectionNotFound, "No collection named 'nope'"),
        (lambda: collections.add_paths("nope", [folder]), CollectionNotFound, "No collection named"),
        (
            lambda: collections.create("missing", [folder / "no-such-file.pdf"]),
            CollectionError,
            f"No such file or folder: {folder / 'no-such-file.pdf'}",
        ),
        (
            lambda: collections.add_paths("notes", [folder / "gone"]),
            CollectionError,
            "No such file or folder",
        ),
        (
            lambda: collections.remove_paths("notes", [folder / "bread.md"]),
            CollectionError,
            f"{folder / 'bread.md'} is not one of the paths of collection 'notes' .they are: {folder}.",
        ),
    ]
    for call, kind, message in cases:
        with pytest.raises(kind, match=message):
            call()
    # Nothing half-made was left behind.
    assert [summary.name for summary in collections.list()] == ["notes"]


def test_a_name_of_exactly_the_limit_is_fine(collections: CollectionStore) -> None:
    assert collections.create("名" * MAX_NAME_CHARS, []).name == "名" * MAX_NAME_CHARS


def test_a_path_that_is_neither_file_nor_folder_is_refused(
    collections: CollectionStore, tmp_path: Path
) -> None:
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    with pytest.raises(CollectionError, match="is neither a file nor a folder"):
        collections.create("pipes", [fifo])


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads every file whatever its permissions")
def test_an_unreadable_path_is_refused(collections: CollectionStore, tmp_path: Path) -> None:
    locked = tmp_path / "locked"
    locked.mkdir(mode=0)
    try:
        with pytest.raises(CollectionError, match=r"Cannot read .*permission denied"):
            collections.create("locked", [locked])
    finally:
        locked.chmod(0o700)


def test_adding_a_path_twice_keeps_one(collections: CollectionStore, folder: Path) -> None:
    collections.create("notes", [folder, folder])
    assert collections.add_paths("notes", [folder, folder / "bread.md"]).roots == (
        str(folder),
        str(folder / "bread.md"),
    )


# Scanning ------------------------------------------------------------------------------------------------


def test_a_first_scan_finds_every_file_but_hidden_ones(collections: CollectionStore, folder: Path) -> None:
    collections.create("notes", [folder])
    plan = collections.scan("notes")
    assert paths(plan.new) == ["bread.md", "garden.txt", "harbour.txt"]
    assert (plan.changed, plan.missing, plan.unchanged, plan.problems) == ((), (), (), ())
    assert plan.to_index == plan.new
    assert set(statuses(collections, "notes").values()) == {"pending"}
    # Still pending until indexed: a second scan lists them again.
    assert paths(collections.scan("notes").new) == ["bread.md", "garden.txt", "harbour.txt"]


def test_a_scan_leaves_out_editors_lock_and_temporary_files(
    collections: CollectionStore, folder: Path
) -> None:
    # What Word, Emacs and Vim leave beside a file being edited: never a document of its own.
    for leftover in ("~$bread.docx", ".#garden.txt", "harbour.txt~", "notes.md.swp", "paper.pdf.crdownload"):
        (folder / leftover).write_bytes(b"lock")
    collections.create("notes", [folder])
    assert paths(collections.scan("notes").new) == ["bread.md", "garden.txt", "harbour.txt"]


def test_scans_tell_new_changed_missing_and_unchanged_files_apart(
    collections: CollectionStore, index: ChunkIndex, folder: Path
) -> None:
    collections.create("notes", [folder])
    index_files(collections, index, "notes", collections.scan("notes"))
    assert set(statuses(collections, "notes").values()) == {"indexed"}
    assert paths(collections.scan("notes").unchanged) == ["bread.md", "garden.txt", "harbour.txt"]

    touch(folder / "garden.txt", "Tomatoes need sun and a lot of water.")
    (folder / "bread.md").unlink()
    (folder / "trips" / "ferry.txt").write_text("Ferries run hourly in summer.")
    plan = collections.scan("notes")
    assert (paths(plan.new), paths(plan.changed), [Path(p).name for p in plan.missing]) == (
        ["ferry.txt"],
        ["garden.txt"],
        ["bread.md"],
    )
    assert paths(plan.unchanged) == ["harbour.txt"]
    assert statuses(collections, "notes") == {
        "bread.md": "missing",
        "ferry.txt": "pending",
        "garden.txt": "changed",
        "harbour.txt": "indexed",
    }

    index_files(collections, index, "notes", plan)
    again = collections.scan("notes")
    assert (again.new, again.changed, again.missing) == ((), (), ())
    # A missing file that comes back as it was is indexed already.
    (folder / "bread.md").write_text("Sourdough rises overnight.")
    file = next(f for f in collections.files("notes") if f.path.endswith("bread.md"))
    os.utime(folder / "bread.md", ns=(file.mtime_ns, file.mtime_ns))
    assert paths(collections.scan("notes").unchanged) == [
        "bread.md",
        "ferry.txt",
        "garden.txt",
        "harbour.txt",
    ]
    assert set(statuses(collections, "notes").values()) == {"indexed"}


def test_a_link_back_up_the_tree_is_walked_once(collections: CollectionStore, folder: Path) -> None:
    (folder / "trips" / "loop").symlink_to(folder, target_is_directory=True)
    (folder / "dangling.txt").symlink_to(folder / "nowhere.txt")
    collections.create("notes", [folder])
    plan = collections.scan("notes")
    assert paths(plan.new) == ["bread.md", "garden.txt", "harbour.txt"]
    assert any("loop" in problem and "already walked" in problem for problem in plan.problems)
    assert any("dangling.txt" in problem for problem in plan.problems)


def test_a_root_that_disappeared_is_reported_and_its_files_marked_missing(
    collections: CollectionStore, index: ChunkIndex, folder: Path
) -> None:
    collections.create("notes", [folder / "trips", folder / "bread.md"])
    index_files(collections, index, "notes", collections.scan("notes"))
    (folder / "trips" / "harbour.txt").unlink()
    (folder / "trips").rmdir()
    plan = collections.scan("notes")
    assert [Path(p).name for p in plan.missing] == ["harbour.txt"]
    assert any(str(folder / "trips") in problem for problem in plan.problems)
    assert paths(plan.unchanged) == ["bread.md"]


def test_a_folder_filter_chooses_files_but_a_named_file_is_always_taken(
    db: Database, index: ChunkIndex, folder: Path
) -> None:
    store = CollectionStore(db, index, accepts=lambda path: path.suffix == ".txt")
    store.create("notes", [folder, folder / "bread.md"])
    assert paths(store.scan("notes").new) == ["bread.md", "garden.txt", "harbour.txt"]
    store.remove_paths("notes", [folder / "bread.md"])
    assert paths(store.scan("notes").new) == ["garden.txt", "harbour.txt"]


# Indexing ------------------------------------------------------------------------------------------------


def test_indexed_files_are_searched_through_the_collection(
    collections: CollectionStore, index: ChunkIndex, folder: Path
) -> None:
    collections.create("notes", [folder])
    index_files(collections, index, "notes", collections.scan("notes"))
    notes = collections.get("notes")
    assert notes.embedding_model == embedder.MODEL
    vector = embedder.embed(["ferry harbour"])[0]
    [best, *_] = index.search("ferry harbour", vector, scope=notes.id, embedding_model=embedder.MODEL)
    assert best.text == "The ferry leaves the harbour at nine."

    # A changed file is searched as it is now, and not as it was.
    touch(folder / "trips" / "harbour.txt", "The harbour is closed for the winter.")
    index_files(collections, index, "notes", collections.scan("notes"))
    hits = index.search("ferry harbour", vector, scope=notes.id, embedding_model=embedder.MODEL)
    assert "The ferry leaves the harbour at nine." not in [hit.text for hit in hits]
    assert "The harbour is closed for the winter." in [hit.text for hit in hits]


def test_a_failing_file_is_reported_and_the_rest_are_indexed(
    collections: CollectionStore, index: ChunkIndex, folder: Path
) -> None:
    (folder / "photo.txt").write_bytes(b"\xff\xd8\xff\xe0 not text")
    collections.create("notes", [folder])
    index_files(collections, index, "notes", collections.scan("notes"))
    files = {Path(f.path).name: f for f in collections.files("notes")}
    assert (files["photo.txt"].status, files["photo.txt"].error) == ("failed", "photo.txt is not text")
    assert {name: f.status for name, f in files.items() if name != "photo.txt"} == dict.fromkeys(
        ["bread.md", "garden.txt", "harbour.txt"], "indexed"
    )
    # Not tried again until it changes.
    assert "photo.txt" in paths(collections.scan("notes").unchanged)
    touch(folder / "photo.txt", "Now it is a caption.")
    assert paths(collections.scan("notes").new) == ["photo.txt"]


def test_a_file_that_fails_after_a_change_loses_its_old_passages(
    collections: CollectionStore, index: ChunkIndex, folder: Path
) -> None:
    collections.create("notes", [folder / "bread.md"])
    index_files(collections, index, "notes", collections.scan("notes"))
    assert index.counts().chunks == 1
    collections.mark_failed("notes", folder / "bread.md", "bread.md is encrypted;\n  give the password")
    [file] = collections.files("notes")
    assert (file.status, file.error, file.content_sha256) == (
        "failed",
        "bread.md is encrypted; give the password",
        None,
    )
    assert index.counts().chunks == 0


def test_marking_a_file_indexed_needs_its_passages(collections: CollectionStore, folder: Path) -> None:
    collections.create("notes", [folder])
    with pytest.raises(CollectionError, match=r"No passages are stored for .*bread\.md"):
        collections.mark_indexed("notes", folder / "bread.md", "0" * 64, 1, 1)


def test_a_file_reported_after_its_path_was_removed_is_refused(
    collections: CollectionStore, index: ChunkIndex, folder: Path
) -> None:
    collections.create("notes", [folder / "trips", folder / "bread.md"])
    plan = collections.scan("notes")
    collections.remove_paths("notes", [folder / "trips"])
    # The indexing loop was still working through the plan.
    with pytest.raises(CollectionError, match=r"harbour\.txt is not in collection 'notes'"):
        index_files(collections, index, "notes", plan)
    with pytest.raises(CollectionError, match="is not in collection"):
        collections.mark_failed("notes", folder / "trips" / "harbour.txt", "unreadable")
    assert paths(collections.files("notes")) == ["bread.md"]


def test_the_summary_counts_files_passages_and_bytes(
    collections: CollectionStore, index: ChunkIndex, folder: Path
) -> None:
    collections.create("notes", [folder])
    collections.create("empty", [])
    index_files(collections, index, "notes", collections.scan("notes"))
    (folder / "bread.md").unlink()
    (folder / "new.txt").write_text("fresh")
    collections.scan("notes")
    empty, notes = collections.list()
    assert (empty.name, empty.files, empty.chunks, empty.size_bytes) == ("empty", FileCounts(), 0, 0)
    assert notes.files == FileCounts(pending=1, indexed=2, missing=1) and notes.files.total == 4
    # garden.txt has two paragraphs; the missing bread.md's passage is still stored.
    assert notes.chunks == 4
    sizes = [(folder / n).stat().st_size for n in ("garden.txt", "trips/harbour.txt", "new.txt")]
    assert notes.size_bytes == sum(sizes)
    assert notes.roots == (str(folder),)


# Removing ------------------------------------------------------------------------------------------------


def raw(db: Database, sql: str) -> list[tuple[Any, ...]]:
    with closing(sqlite3.connect(db.path)) as conn:
        return conn.execute(sql).fetchall()


def test_removing_a_collection_keeps_what_others_use_and_the_users_files(
    collections: CollectionStore, index: ChunkIndex, folder: Path, db: Database
) -> None:
    collections.create("notes", [folder])
    collections.create("bread", [folder / "bread.md"])
    for name in ("notes", "bread"):
        index_files(collections, index, name, collections.scan(name))
    assert index.counts().chunks == 4

    collections.remove("notes")
    assert [summary.name for summary in collections.list()] == ["bread"]
    # Only bread.md's passage is still used.
    assert index.counts().chunks == 1
    assert raw(db, "SELECT count(*) FROM collection_files") == [(1,)]
    assert sorted(p.name for p in folder.rglob("*")) == sorted(
        [".git", ".secret.txt", "bread.md", "config", "garden.txt", "harbour.txt", "trips"]
    )
    db.dispose()
    for file in db.path.parent.glob(f"{db.path.name}*"):
        assert b"basil" not in file.read_bytes(), file


def test_removing_a_path_drops_the_files_no_other_path_covers(
    collections: CollectionStore, index: ChunkIndex, folder: Path
) -> None:
    collections.create("notes", [folder, folder / "trips"])
    index_files(collections, index, "notes", collections.scan("notes"))
    left = collections.remove_paths("notes", [folder])
    assert left.roots == (str(folder / "trips"),)
    assert paths(collections.files("notes")) == ["harbour.txt"]
    assert index.counts().chunks == 1
    assert collections.scan("notes").new == ()


def test_a_stored_file_goes_with_the_last_collection_using_it(
    collections: CollectionStore, index: ChunkIndex, folder: Path, db: Database, tmp_path: Path
) -> None:
    """An attachment whose message was deleted while a collection held the same bytes."""
    collections.create("bread", [folder / "bread.md"])
    index_files(collections, index, "bread", collections.scan("bread"))
    [file] = collections.files("bread")
    assert file.content_sha256 is not None
    sha = file.content_sha256
    stored = tmp_path / "home" / "attachments" / sha[:2] / sha
    stored.parent.mkdir(parents=True)
    stored.write_bytes((folder / "bread.md").read_bytes())
    with closing(sqlite3.connect(db.path)) as conn, conn:
        conn.execute(
            "INSERT INTO files (sha256, size_bytes, mime_type, created_at) VALUES (?, 26, 'text/markdown', "
            "'2025-01-01T00:00:00.000000+00:00')",
            (sha,),
        )
    collections.remove("bread")
    assert raw(db, "SELECT count(*) FROM files") == [(0,)]
    assert not stored.exists()
    assert (folder / "bread.md").exists()
