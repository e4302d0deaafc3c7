"""The GUI's handle on document collections: what each holds and how far its indexing has got, the changes
the user makes to them, and indexing itself, never on the GUI thread.

Two workers of its own:
- "indexing" (one thread) runs the refresh passes, which can take minutes (every passage goes through the
  embedding model), and the removals that must not run under a pass over the same collection (a pass is
  cancelled first, and the removal runs as soon as it has stopped). Not `AppServices.documents_worker`:
  that one reads the files attached to the next message, and Send waits for it. Not `background` either:
  the window's database work would queue behind a pass.
- "collections" (one thread, in the order asked): listing, creating, adding paths, checking a
  collection for changes. Quick database and disk work that must not wait behind a pass.

SQLite: a pass writes in short transactions (the scan's rows; each file's passages once embedded; its
status), never while it embeds, so a chat's writes wait milliseconds for it at most (WAL, with writers
that queue for the lock under a busy timeout: app.storage.db). The embedding runner serves the chat's
question between two batches of a pass (it is thread-safe, one call at a time).

All state lives on the GUI thread; the workers report through signals.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from dataclasses import dataclass
from functools import partial
from pathlib import Path

from PySide6.QtCore import QObject, Signal, Slot

from app.documents.collections import CollectionStore, CollectionSummary
from app.documents.library import DocumentLibrary, IndexProgress, RefreshReport
from app.documents.watch import CollectionWatcher
from app.qt.background import Background, describe


@dataclass(frozen=True)
class FileEntry:
    path: str
    status: str  # app.storage.orm.COLLECTION_FILE_STATUSES
    error: str | None  # why it failed, in one line
    passages: int | None  # stored for it; None when none are
    size_bytes: int


@dataclass(frozen=True)
class CollectionFiles:
    name: str
    roots: tuple[str, ...]
    files: tuple[FileEntry, ...]


@dataclass(frozen=True)
class IndexingProgress:
    collection: str
    done: int  # files dealt with (indexed or failed) in this pass
    total: int  # files this pass has to index; 0 until its scan is done
    path: str  # the file being indexed; "" before the first and after the last
    passages: int  # stored for the collection's searchable files so far


class DocumentsService(QObject):
    # Every collection (a tuple of CollectionSummary), after each change and each pass.
    collectionsChanged = Signal(object)
    # A collection's paths and files (CollectionFiles), as asked for by load_files.
    filesListed = Signal(object)
    created = Signal(str)
    removed = Signal(str)
    indexingStarted = Signal(str)
    # An IndexingProgress, before each file and once at the end.
    progressed = Signal(object)
    # (collection, RefreshReport), or (collection, None) when the pass failed (`failed` says why).
    indexingFinished = Signal(str, object)
    # What the user asked for could not be done: one line that says why.
    failed = Signal(str)

    _stepped = Signal(object)
    _refreshAsked = Signal(str)

    def __init__(self, library: DocumentLibrary, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self._library = library
        self._control = Background("collections", parent=self)
        self._indexing = Background("indexing", parent=self)
        self._summaries: tuple[CollectionSummary, ...] = ()
        self._running: str | None = None
        self._cancel: threading.Event | None = None
        self._progress: IndexingProgress | None = None
        # Collections with a pass to run after the current one, in the order asked, each once.
        self._waiting: list[str] = []
        # (collection, check) listings asked for and not started yet.
        self._listings_lock = threading.Lock()
        self._listings: set[tuple[str, bool]] = set()
        self._closing = False
        self._owner = threading.get_ident()
        self._watcher: CollectionWatcher | None = None
        self._stepped.connect(self._on_step)
        # From any thread (a folder watcher's): the request is handled on ours.
        self._refreshAsked.connect(self.refresh_in_background)

    @property
    def store(self) -> CollectionStore:
        return self._library.collections

    def collections(self) -> tuple[CollectionSummary, ...]:
        """As last listed (reload asks again)."""
        return self._summaries

    def names(self) -> tuple[str, ...]:
        return tuple(summary.name for summary in self._summaries)

    @property
    def indexing(self) -> IndexingProgress | None:
        """The pass running now, as far as it has got."""
        return self._progress

    def waiting(self) -> tuple[str, ...]:
        return tuple(self._waiting)

    # -- reading ------------------------------------------------------------------------------------

    def reload(self) -> None:
        self._control.call(self.store.list, self._listed, self._fail, operation="listing collections")

    def load_files(self, name: str, *, check: bool = False) -> None:
        """Answered by filesListed. `check`: look at the disk first, so files changed, added or gone since
        the last pass show as such (not while a pass over it runs: the pass is doing just that)."""
        scan = check and name != self._running
        key = (name, scan)
        with self._listings_lock:
            # Asked for on every file a pass indexes: one listing waiting per collection is enough.
            if key in self._listings:
                return
            self._listings.add(key)
        self._control.call(
            partial(self._files, key), self._files_listed, self._fail, operation="listing files"
        )

    def _files(self, key: tuple[str, bool]) -> CollectionFiles:
        with self._listings_lock:
            self._listings.discard(key)
        name, scan = key
        store = self.store
        if scan:
            store.scan(name)
        collection = store.get(name)
        passages = store.passages(name)
        files = tuple(
            FileEntry(f.path, f.status, f.error, passages.get(f.path), f.size_bytes)
            for f in store.files(name)
        )
        return CollectionFiles(collection.name, collection.roots, files)

    def _files_listed(self, files: CollectionFiles) -> None:
        self.filesListed.emit(files)

    def _listed(self, summaries: Sequence[CollectionSummary]) -> None:
        self._summaries = tuple(summaries)
        if self._watcher is not None:
            # Every change to collections or their paths is listed again after it: the watcher follows.
            self._watcher.sync()
        self.collectionsChanged.emit(self._summaries)

    def watch(self, ignore: Sequence[Path] = ()) -> None:
        """Index what changed while the app was closed, then keep watching the collections' files and
        folders, so that what changes on disk is indexed again without being asked (app.documents.watch).
        `ignore`: folders whose changes never count (Hearth's own home)."""
        self._watcher = CollectionWatcher(self.store, self.refresh_in_background, ignore=ignore)
        self._watcher.start()
        self._control.call(self.store.list, self._caught_up, self._fail, operation="listing collections")

    def _caught_up(self, summaries: Sequence[CollectionSummary]) -> None:
        self._listed(summaries)
        for summary in summaries:
            self.refresh_in_background(summary.name)

    def _fail(self, error: Exception) -> None:
        self.failed.emit(describe(error))

    # -- changes ------------------------------------------------------------------------------------

    def create(self, name: str, paths: Sequence[Path] = ()) -> None:
        """A new collection (its name checked and its paths with it); indexed at once if it has paths."""
        wanted = tuple(paths)

        def made(collection_name: str) -> None:
            self.created.emit(collection_name)
            self.reload()
            if wanted:
                self.refresh_in_background(collection_name)

        self._control.call(
            lambda: self.store.create(name, wanted).name, made, self._fail, operation="creating a collection"
        )

    def add_paths(self, name: str, paths: Sequence[Path]) -> None:
        """Files or folders (recursive), then indexed."""
        wanted = tuple(paths)

        def added(_collection: object) -> None:
            self.reload()
            self.load_files(name)
            self.refresh_in_background(name)

        self._control.call(
            lambda: self.store.add_paths(name, wanted), added, self._fail, operation="adding to a collection"
        )

    def remove_paths(self, name: str, paths: Sequence[Path | str]) -> None:
        """Take paths out of the collection, with the files only they covered (after a pass over the
        collection stops; it then goes on with what is left)."""
        wanted = tuple(paths)
        resume = self._stop(name)

        def done(_collection: object) -> None:
            self.reload()
            self.load_files(name)
            if resume:
                self.refresh_in_background(name)

        def failed(error: Exception) -> None:
            self._fail(error)
            if resume:
                self.refresh_in_background(name)

        self._indexing.call(
            lambda: self.store.remove_paths(name, wanted), done, failed, operation="removing paths"
        )

    def remove(self, name: str) -> None:
        """Delete the collection (its passages with it; the user's files stay), a pass over it cancelled."""
        self._stop(name)

        def done(_none: None) -> None:
            self.removed.emit(name)
            self.reload()

        self._indexing.call(
            lambda: self.store.remove(name), done, self._fail, operation="removing a collection"
        )

    def _stop(self, name: str) -> bool:
        """Cancel the pass over `name` and drop the one waiting; whether there was either."""
        had = name == self._running or name in self._waiting
        self.cancel(name)
        return had

    # -- indexing -----------------------------------------------------------------------------------

    @Slot(str)
    def refresh_in_background(self, name: str) -> None:
        """Index what changed in the collection. One pass runs at a time; asked again while one over the
        same collection runs, one more pass follows it (however often it is asked). Any thread may call."""
        if threading.get_ident() != self._owner:
            self._refreshAsked.emit(name)
            return
        if self._closing:
            return
        if name in self._waiting:
            return
        if self._running is not None:
            self._waiting.append(name)
            return
        self._start(name)

    def cancel(self, name: str | None = None) -> None:
        """Stop the pass (over `name`, if given) at the next file or batch, and drop the passes waiting for
        that collection. What was indexed stays indexed; the rest stays to do."""
        if name is not None:
            self._waiting = [waiting for waiting in self._waiting if waiting != name]
        if self._cancel is not None and (name is None or name == self._running):
            self._cancel.set()

    def _start(self, name: str) -> None:
        cancel = threading.Event()
        self._running, self._cancel = name, cancel
        self._progress = IndexingProgress(name, 0, 0, "", 0)
        self.indexingStarted.emit(name)
        self._indexing.call(
            partial(self._refresh, name, cancel),
            lambda report: self._ended(name, report),
            lambda error: self._pass_failed(name, error),
            operation="indexing a collection",
        )

    def _refresh(self, name: str, cancel: threading.Event) -> RefreshReport:
        """On the indexing thread."""
        if cancel.is_set():
            return RefreshReport(name, 0, (), 0, 0, cancelled=True)
        library = self._library
        collection_id = library.collections.get(name).id

        def progress(step: IndexProgress) -> None:
            passages = library.index.counts(collection_id).chunks
            self._stepped.emit(IndexingProgress(name, step.done, step.total, step.path, passages))

        return library.refresh(name, progress, cancel)

    def _on_step(self, step: IndexingProgress) -> None:
        if step.collection == self._running:
            self._progress = step
        self.progressed.emit(step)

    def _ended(self, name: str, report: RefreshReport | None) -> None:
        self._running, self._cancel, self._progress = None, None, None
        self.indexingFinished.emit(name, report)
        if self._closing:
            return
        self.reload()
        if self._waiting:
            self._start(self._waiting.pop(0))

    def _pass_failed(self, name: str, error: Exception) -> None:
        self._fail(error)
        self._ended(name, None)

    def shutdown(self) -> None:
        """Blocking: the pass running stops at its next file or batch; changes asked for still land."""
        self._closing = True
        if self._watcher is not None:
            self._watcher.stop()
        self._waiting.clear()
        self.cancel()
        self._indexing.shutdown()
        self._control.shutdown()
