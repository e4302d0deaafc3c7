"""The collection watcher, on real folders: which changes it tells, once per burst, for which collections, and
how it copes with roots that go, come back, cannot be read or cannot be watched by events."""

from __future__ import annotations

import ctypes
import errno
import logging
import os
import shutil
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from app.attachments.files import FileStore
from app.documents.collections import CollectionStore, leftover_name
from app.documents.extract import known_by_name
from app.documents.index import ChunkIndex
from app.documents.library import DocumentLibrary, RefreshReport
from app.documents.watch import CollectionWatcher, WatchState
from app.storage.db import Database

# How long a test waits for what must happen: generous for a loaded machine, and never a measurement.
WAIT = 30.0
# Long enough that a test's own back-to-back file operations always fall in one burst.
QUIET = 1.0

linux_only = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="inotify is Linux's")


def eventually(check: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + WAIT
    while not check():
        if time.monotonic() > deadline:
            pytest.fail(f"{what}: not within {WAIT:g} s")
        time.sleep(0.02)


class Told:
    """The watcher's on_changed: every name told, in order, and the threads it was told on."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._names: list[str] = []
        self.threads: set[int] = set()

    def __call__(self, name: str) -> None:
        with self._cond:
            self.threads.add(threading.get_ident())
            self._names.append(name)
            self._cond.notify_all()

    def count(self, name: str) -> int:
        with self._cond:
            return self._names.count(name)

    def wait_for(self, name: str, times: int = 1) -> None:
        with self._cond:
            if not self._cond.wait_for(lambda: self._names.count(name) >= times, WAIT):
                pytest.fail(f"{name!r} was not told {times} time(s) within {WAIT:g} s: {self._names}")

    def settled(self, marker: Path) -> list[str]:
        """What was told, once every burst before now is over: a change to the marker collection, made
        now, is told after them (bursts are told in the order they end)."""
        with self._cond:
            seen = self._names.count("marker")
        (marker / f"mark-{seen}.txt").write_text("mark")
        self.wait_for("marker", seen + 1)
        with self._cond:
            return [name for name in self._names if name != "marker"]


@pytest.fixture
def collections(db: Database) -> CollectionStore:
    return CollectionStore(db, ChunkIndex(db))


@pytest.fixture
def marker(tmp_path: Path, collections: CollectionStore) -> Path:
    folder = tmp_path / "marker"
    folder.mkdir()
    collections.create("marker", [folder])
    return folder


@pytest.fixture
def notes(tmp_path: Path) -> Path:
    """A folder with a note two levels down."""
    deep = tmp_path / "notes" / "projects" / "harbour"
    deep.mkdir(parents=True)
    (deep / "plan.md").write_text("# Plan\n\nThe ferry leaves at nine.")
    return tmp_path / "notes"


WatcherFactory = Callable[..., tuple[CollectionWatcher, Told]]


@pytest.fixture
def watching(collections: CollectionStore, marker: Path, hermetic_home: Path) -> Iterator[WatcherFactory]:
    """Start a watcher on every collection (the marker one included) and wait until each root is placed."""
    started: list[CollectionWatcher] = []

    def start(**options: object) -> tuple[CollectionWatcher, Told]:
        told = Told()
        settings: dict[str, object] = {
            "ignore": [hermetic_home],
            "quiet_seconds": QUIET,
            "recheck_seconds": 0.2,
            "poll_seconds": 0.2,
        }
        settings.update(options)
        watcher = CollectionWatcher(collections, told, **settings)  # type: ignore[arg-type]
        started.append(watcher)
        watcher.start()
        roots = {root for paths in collections.roots().values() for root in paths}
        eventually(lambda: set(watcher.states()) == roots, "the watcher reads the collections")
        return watcher, told

    yield start
    for watcher in started:
        watcher.stop()


def new_threads(before: set[threading.Thread]) -> list[str]:
    return [t.name for t in threading.enumerate() if t not in before and t.is_alive()]


# What counts -------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "name",
    ["~$plan.docx", "~WRL0001.tmp", ".#plan.md", "#plan.md#", "plan.md~", ".plan.md.swp", "plan.md.swp",
     "paper.pdf.crdownload", "paper.pdf.part", "Thumbs.db", "desktop.ini"],
)  # fmt: skip
def test_editor_leftovers_are_recognised(name: str) -> None:
    assert leftover_name(name)


@pytest.mark.parametrize("name", ["plan.md", "report.docx", "#1 priorities.txt", "notes", "c#.md"])
def test_documents_are_not_leftovers(name: str) -> None:
    assert not leftover_name(name)


def test_kinds_are_known_by_extension_or_whole_name() -> None:
    assert all(known_by_name(n) for n in ["a.PDF", "b.docx", "c.py", "d.txt", "Makefile", "e.tsv", "f.epub"])
    assert not any(known_by_name(n) for n in ["photo.png", "a.zip", "old.doc", "README", "data.bin"])


HARBOUR = Path("projects", "harbour")
ACTIONS: dict[str, Callable[[Path, Path], object]] = {
    "created": lambda root, outside: (root / HARBOUR / "tides.md").write_text("High at six."),
    "modified": lambda root, outside: (root / HARBOUR / "plan.md").write_text("Leaves at ten."),
    "deleted": lambda root, outside: (root / HARBOUR / "plan.md").unlink(),
    "renamed": lambda root, outside: (root / HARBOUR / "plan.md").rename(root / HARBOUR / "plan-v2.md"),
    "moved out": lambda root, outside: (root / HARBOUR / "plan.md").rename(outside / "plan.md"),
    "moved in": lambda root, outside: (outside / "letter.txt").rename(root / "projects" / "letter.txt"),
    "folder moved out": lambda root, outside: (root / "projects").rename(outside / "projects"),
    "folder moved in": lambda root, outside: (outside / "trip").rename(root / "trip"),
    "folder deleted": lambda root, outside: shutil.rmtree(root / "projects"),
    "many at once": lambda root, outside: [
        (root / "projects" / f"day-{i}.txt").write_text(f"Day {i}.") for i in range(50)
    ],
}


@pytest.mark.parametrize("action", list(ACTIONS))
def test_a_change_in_a_nested_folder_is_told_once(
    action: str,
    collections: CollectionStore,
    watching: WatcherFactory,
    notes: Path,
    marker: Path,
    tmp_path: Path,
) -> None:
    outside = tmp_path / "outside"
    (outside / "trip").mkdir(parents=True)
    (outside / "letter.txt").write_text("Dear harbour master,")
    (outside / "trip" / "ferry.md").write_text("Tickets at the pier.")
    collections.create("notes", [notes])
    collections.create("unrelated", [outside])
    watcher, told = watching()
    assert watcher.states()[str(notes)] is WatchState.EVENTS

    ACTIONS[action](notes, outside)
    told.wait_for("notes")
    # A move between two collections' folders is a change to both; every other action touches one.
    expected = ["notes", "unrelated"] if "moved" in action else ["notes"]
    if "moved" in action:
        told.wait_for("unrelated")
    assert sorted(told.settled(marker)) == expected
    # One thread of the watcher's, so never two calls at once.
    assert len(told.threads) == 1 and threading.get_ident() not in told.threads


def test_a_burst_longer_than_the_quiet_time_is_told_once_after_its_last_change(
    collections: CollectionStore, watching: WatcherFactory, notes: Path, marker: Path
) -> None:
    collections.create("notes", [notes])
    _watcher, told = watching(quiet_seconds=2.0)
    for i in range(12):  # one save a quarter of a second apart, 3 s in all
        (notes / f"draft-{i}.md").write_text(f"Draft {i}.")
        time.sleep(0.25)
    told.wait_for("notes")
    assert told.settled(marker) == ["notes"]


def test_changes_that_never_stop_are_told_while_they_go_on(
    collections: CollectionStore, watching: WatcherFactory, notes: Path
) -> None:
    collections.create("notes", [notes])
    _watcher, told = watching(quiet_seconds=60.0, longest_wait_seconds=1.0)
    journal = notes / "journal.txt"
    writes = 0
    while told.count("notes") == 0:
        journal.write_text(f"Entry {writes}.")
        writes += 1
        time.sleep(0.1)
        if writes > WAIT * 10:
            pytest.fail("a collection changing all the time was never told")


def test_leftovers_hidden_files_other_kinds_and_hearths_home_are_not_told(
    collections: CollectionStore, watching: WatcherFactory, notes: Path, marker: Path
) -> None:
    collections.create("notes", [notes])
    home = notes / "hearth-home"
    (home / "logs").mkdir(parents=True)
    _watcher, told = watching(ignore=[home])
    deep = notes / "projects" / "harbour"
    for name in ["~$plan.docx", ".#plan.md", "#plan.md#", "plan.md~", ".plan.md.swp", "photo.png", "a.zip",
                 "old.doc", "paper.pdf.crdownload"]:  # fmt: skip
        (deep / name).write_bytes(b"not a document")
    (notes / ".git" / "objects").mkdir(parents=True)
    (notes / ".git" / "objects" / "notes.md").write_text("hidden folder")
    (notes / ".hidden.md").write_text("hidden file")
    (home / "hearth.sqlite3-wal").write_bytes(b"\0" * 64)
    (home / "logs" / "hearth.log").write_text("indexing wrote this")
    (deep / "photo.png").unlink()
    (deep / "a.zip").rename(deep / "b.zip")
    assert told.settled(marker) == []


def test_collections_sharing_a_folder_are_each_told(
    collections: CollectionStore, watching: WatcherFactory, notes: Path, marker: Path
) -> None:
    harbour = notes / "projects" / "harbour"
    collections.create("everything", [notes])
    collections.create("also everything", [notes])
    collections.create("harbour only", [harbour])
    _watcher, told = watching()
    (harbour / "tides.md").write_text("High at six.")
    for name in ("everything", "also everything", "harbour only"):
        told.wait_for(name)
    assert sorted(told.settled(marker)) == ["also everything", "everything", "harbour only"]
    (notes / "projects" / "budget.csv").write_text("ferry,12\n")
    told.wait_for("everything", 2)
    assert sorted(told.settled(marker)) == ["also everything"] * 2 + ["everything"] * 2 + ["harbour only"]


def test_a_folder_added_through_a_link_is_watched_where_it_leads(
    collections: CollectionStore, watching: WatcherFactory, notes: Path, marker: Path, tmp_path: Path
) -> None:
    link = tmp_path / "shortcut"
    link.symlink_to(notes, target_is_directory=True)
    collections.create("linked", [link])
    collections.create("direct", [notes])
    watcher, told = watching()
    (notes / "projects" / "harbour" / "plan.md").write_text("Leaves at ten.")
    told.wait_for("linked")
    told.wait_for("direct")
    assert sorted(told.settled(marker)) == ["direct", "linked"]

    # One folder under two paths: letting one path go keeps watching the other.
    collections.remove("direct")
    watcher.sync()
    eventually(lambda: str(notes) not in watcher.states(), "the removed collection's folder is let go")
    (notes / "projects" / "harbour" / "plan.md").write_text("Leaves at eleven.")
    told.wait_for("linked", 2)
    assert sorted(told.settled(marker)) == ["direct", "linked", "linked"]


def test_a_file_root_is_told_its_own_changes_only(
    collections: CollectionStore, watching: WatcherFactory, notes: Path, marker: Path
) -> None:
    plan = notes / "projects" / "harbour" / "plan.md"
    sibling = plan.with_name("minutes.md")
    sibling.write_text("Minutes.")
    collections.create("plan", [plan])
    _watcher, told = watching()
    sibling.write_text("Minutes, changed.")
    assert told.settled(marker) == []

    # Saved the way many editors save: a new file renamed over the old one.
    draft = plan.with_name("plan.md.new")
    draft.write_text("# Plan\n\nThe ferry leaves at ten.")
    draft.replace(plan)
    told.wait_for("plan")
    plan.unlink()
    told.wait_for("plan", 2)
    plan.write_text("# Plan\n\nBack.")
    told.wait_for("plan", 3)
    assert told.settled(marker) == ["plan"] * 3


# Roots that go and come back -----------------------------------------------------------------------------


def test_a_root_deleted_and_made_again_is_watched_again(
    collections: CollectionStore,
    watching: WatcherFactory,
    notes: Path,
    marker: Path,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    other = tmp_path / "other"
    other.mkdir()
    collections.create("notes", [notes])
    collections.create("other", [other])
    watcher, told = watching()
    caplog.set_level(logging.INFO, logger="hearth.documents")

    shutil.rmtree(notes)
    told.wait_for("notes")
    assert watcher.states()[str(notes)] is WatchState.UNAVAILABLE
    assert told.settled(marker) == ["notes"]
    (other / "still.md").write_text("The rest is still watched.")
    told.wait_for("other")

    (notes / "projects").mkdir(parents=True)
    (notes / "projects" / "plan.md").write_text("Back again.")
    told.wait_for("notes", 2)
    assert watcher.states()[str(notes)] is WatchState.EVENTS
    (notes / "projects" / "plan.md").write_text("Back again, and changed.")
    told.wait_for("notes", 3)
    assert told.settled(marker) == ["notes", "other", "notes", "notes"]
    gone = [r for r in caplog.records if r.levelno == logging.WARNING and str(notes) in r.getMessage()]
    assert len(gone) == 1 and "No such file or directory" in gone[0].getMessage()
    assert any(r.getMessage() == f"Watching {notes} for changes again" for r in caplog.records)


def test_a_root_moved_away_and_back_is_told_both_times(
    collections: CollectionStore, watching: WatcherFactory, notes: Path, marker: Path, tmp_path: Path
) -> None:
    collections.create("notes", [notes])
    watcher, told = watching()
    # Nothing under the root changes, and inotify says nothing about a watched folder's own move.
    notes.rename(tmp_path / "elsewhere")
    told.wait_for("notes")
    assert watcher.states()[str(notes)] is WatchState.UNAVAILABLE
    (tmp_path / "elsewhere" / "projects" / "moved.md").write_text("Not in the collection now.")
    assert told.settled(marker) == ["notes"]
    (tmp_path / "elsewhere").rename(notes)
    told.wait_for("notes", 2)
    assert watcher.states()[str(notes)] is WatchState.EVENTS
    assert told.settled(marker) == ["notes", "notes"]


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads every folder whatever its permissions")
def test_an_unreadable_root_waits_until_it_can_be_read(
    collections: CollectionStore,
    watching: WatcherFactory,
    notes: Path,
    marker: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    collections.create("notes", [notes])
    notes.chmod(0)
    try:
        watcher, told = watching()
        assert watcher.states()[str(notes)] is WatchState.UNAVAILABLE
        assert any("permission denied" in r.getMessage() for r in caplog.records)
    finally:
        notes.chmod(0o700)
    told.wait_for("notes")
    assert watcher.states()[str(notes)] is WatchState.EVENTS
    (notes / "projects" / "new.md").write_text("Readable again.")
    told.wait_for("notes", 2)
    assert told.settled(marker) == ["notes", "notes"]


# Following the collections ---------------------------------------------------------------------------


def test_sync_follows_paths_and_collections_added_and_removed(
    collections: CollectionStore, watching: WatcherFactory, notes: Path, marker: Path, tmp_path: Path
) -> None:
    later = tmp_path / "later"
    later.mkdir()
    collections.create("notes", [notes])
    watcher, told = watching()

    collections.add_paths("notes", [later])
    watcher.sync()
    eventually(lambda: str(later) in watcher.states(), "the added folder is watched")
    (later / "new.md").write_text("Seen since the sync.")
    told.wait_for("notes")

    collections.remove_paths("notes", [notes])
    collections.create("late", [notes])
    watcher.sync()
    # The path stays watched, so states() cannot show when the sync was applied; a burst told after it can
    # (the watcher applies a sync asked for before a burst ends before it tells that burst).
    assert told.settled(marker) == ["notes"]
    (notes / "projects" / "again.md").write_text("Now the other collection's.")
    told.wait_for("late")
    collections.remove("late")
    watcher.sync()
    eventually(lambda: str(notes) not in watcher.states(), "the removed folder is let go")
    (notes / "projects" / "unwatched.md").write_text("No collection has this now.")
    assert told.settled(marker) == ["notes", "late"]


def test_a_failing_callback_does_not_stop_the_watching(
    collections: CollectionStore, notes: Path, caplog: pytest.LogCaptureFixture
) -> None:
    told = Told()

    def on_changed(name: str) -> None:
        told(name)
        raise RuntimeError("the receiver broke")

    collections.create("notes", [notes])
    with CollectionWatcher(collections, on_changed, quiet_seconds=0.1) as watcher:
        eventually(lambda: str(notes) in watcher.states(), "the watcher reads the collections")
        (notes / "one.md").write_text("One.")
        told.wait_for("notes")
        (notes / "two.md").write_text("Two.")
        told.wait_for("notes", 2)
    assert any("the receiver broke" in (r.exc_text or "") for r in caplog.records)


def test_stop_ends_every_thread_it_started(collections: CollectionStore, notes: Path) -> None:
    before = set(threading.enumerate())
    told = Told()
    collections.create("notes", [notes])
    watcher = CollectionWatcher(collections, told, quiet_seconds=0.1)
    watcher.start()
    eventually(lambda: str(notes) in watcher.states(), "the watcher reads the collections")
    (notes / "one.md").write_text("One.")
    told.wait_for("notes")
    assert new_threads(before)
    watcher.stop()
    assert new_threads(before) == []


# When the system cannot watch by events -------------------------------------------------------------------


@linux_only
def test_a_tree_beyond_the_inotify_watch_limit_is_polled(
    collections: CollectionStore,
    watching: WatcherFactory,
    notes: Path,
    marker: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The kernel refuses watches with ENOSPC once fs.inotify.max_user_watches are taken; here it refuses
    them for folders named `crowded`, first below the root when watching starts, then for one made later."""
    from watchdog.observers import inotify_c

    real_add_watch = inotify_c.inotify_add_watch

    def add_watch(fd: int, path: bytes, mask: int) -> inotify_c.WatchDescriptor:
        if b"crowded" in path:
            ctypes.set_errno(errno.ENOSPC)
            return inotify_c.WatchDescriptor(-1)
        return real_add_watch(fd, path, mask)

    monkeypatch.setattr(inotify_c, "inotify_add_watch", add_watch)
    before = set(threading.enumerate())
    (notes / "crowded" / "inner").mkdir(parents=True)
    other = notes.parent / "other"
    other.mkdir()
    collections.create("notes", [notes])
    collections.create("other", [other])
    watcher, told = watching()
    assert watcher.states() == {
        str(notes): WatchState.POLLING,
        str(other): WatchState.EVENTS,
        str(marker): WatchState.EVENTS,
    }
    assert any(str(notes) in r.getMessage() and "max_user_watches" in r.getMessage() for r in caplog.records)
    (notes / "crowded" / "inner" / "seen.md").write_text("Seen by polling.")
    told.wait_for("notes")

    (other / "crowded").mkdir()
    told.wait_for("other")
    eventually(lambda: watcher.states()[str(other)] is WatchState.POLLING, "the other folder is polled")
    (other / "crowded" / "seen.md").write_text("Seen by polling too.")
    told.wait_for("other", 2)
    assert told.settled(marker) == ["notes", "other", "other"]
    watcher.stop()
    assert new_threads(before) == []


@linux_only
def test_no_inotify_instance_left_means_polling_everything(
    collections: CollectionStore,
    watching: WatcherFactory,
    notes: Path,
    marker: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """inotify_init fails with EMFILE once fs.inotify.max_user_instances are taken."""
    from watchdog.observers import inotify_c

    def no_instance() -> int:
        ctypes.set_errno(errno.EMFILE)
        return -1

    monkeypatch.setattr(inotify_c, "inotify_init", no_instance)
    collections.create("notes", [notes])
    watcher, told = watching()
    assert set(watcher.states().values()) == {WatchState.POLLING}
    assert sum("max_user_instances" in r.getMessage() for r in caplog.records) == 1
    (notes / "projects" / "harbour" / "plan.md").write_text("Leaves at ten, polled.")
    told.wait_for("notes")
    assert told.settled(marker) == ["notes"]


# With the real indexing -------------------------------------------------------------------------------


@pytest.mark.model
def test_an_edit_on_disk_is_found_by_the_next_search(
    db: Database, embedding_model: Path, tmp_path: Path
) -> None:
    from app.documents.embedding import RunnerEmbedder

    handbook = tmp_path / "handbook"
    handbook.mkdir()
    ferries = handbook / "ferries.md"
    ferries.write_text("# Ferries\n\nThe ferry to the island leaves the harbour at nine every morning.\n")
    library = DocumentLibrary(
        db, FileStore(tmp_path / "home" / "attachments"), lambda: RunnerEmbedder(embedding_model)
    )
    refreshed = threading.Event()
    reports: list[RefreshReport] = []

    def refresh(name: str) -> None:
        reports.append(library.refresh(name))
        refreshed.set()

    try:
        library.collections.create("handbook", [handbook])
        assert library.refresh("handbook").indexed == 1
        question = "What is the lighthouse keeper's cat called?"
        assert not any("Biscuit" in p.text for p in library.search_collection("handbook", question))
        with CollectionWatcher(
            library.collections, refresh, ignore=[tmp_path / "home"], quiet_seconds=0.5
        ) as w:
            eventually(lambda: str(handbook) in w.states(), "the watcher reads the collections")
            with ferries.open("a", encoding="utf-8") as fh:
                fh.write("\n## The lighthouse\n\nThe lighthouse keeper's cat is called Biscuit.\n")
            assert refreshed.wait(WAIT), "the edit was not indexed"
        assert [(r.indexed, r.failed) for r in reports] == [(1, ())]
        best = library.search_collection("handbook", question)[0]
        assert "Biscuit" in best.text and best.name == str(ferries)
    finally:
        library.close()
