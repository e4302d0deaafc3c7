"""Watching the collections' files and folders while the app runs, so that what changes on disk is indexed
again without the user asking.

The watcher says that a collection changed by calling `on_changed(name)`: once per burst of changes (an
editor's save is several events, a copied folder thousands), `quiet_seconds` after the last one, or
`longest_wait_seconds` after the first if the changes never stop. It counts only what a refresh would act
on: files of a kind Hearth reads (or without an extension, which are read by content) created, changed,
deleted or moved in or out, and folders coming or going. Hidden files and folders (a scan skips them),
editors' temporary and lock files and everything under Hearth's own home are left out. Indexing again is
the caller's work (DocumentLibrary.refresh, on a worker of its own): the watcher only says when.

How: watchdog (Apache-2.0), which uses what each system offers, recursively: inotify on Linux, FSEvents
on macOS, ReadDirectoryChangesW on Windows. Qt's QFileSystemWatcher watches one level of a folder and would
bring Qt under app/; polling every folder costs a scan's worth of stat calls each time. Polling stays the
fallback for a tree inotify cannot watch because the user's watches (one per folder,
fs.inotify.max_user_watches) or inotify instances ran out.

A root that disappears or cannot be read is left unwatched (logged once) and looked at again every
`recheck_seconds`; its collections are told when it goes and when it is back.

Threads: watchdog's observers report events on their own threads, which only note them. Everything else
(reading the collections, watching and unwatching, checking the roots, calling on_changed) happens on the
watcher's one thread, so on_changed is never called twice at once, and never after stop() returns.
"""

from __future__ import annotations

import enum
import errno
import logging
import os
import stat
import sys
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path, PurePath
from typing import Final

from watchdog.events import (
    EVENT_TYPE_CLOSED,
    EVENT_TYPE_CREATED,
    EVENT_TYPE_DELETED,
    EVENT_TYPE_MODIFIED,
    EVENT_TYPE_MOVED,
    FileSystemEvent,
    FileSystemEventHandler,
)
from watchdog.observers import Observer
from watchdog.observers.api import BaseObserver, ObservedWatch
from watchdog.observers.polling import PollingObserver
from watchdog.utils import UnsupportedLibcError

from app.documents.collections import CollectionStore, PathLike, leftover_name
from app.documents.extract import known_by_name

log = logging.getLogger("hearth.documents")

_FILE_EVENTS: Final = frozenset(
    {EVENT_TYPE_CREATED, EVENT_TYPE_DELETED, EVENT_TYPE_MODIFIED, EVENT_TYPE_MOVED, EVENT_TYPE_CLOSED}
)
# A folder's own "modified" only echoes a change to something in it, which has its own event.
_FOLDER_EVENTS: Final = frozenset({EVENT_TYPE_CREATED, EVENT_TYPE_DELETED, EVENT_TYPE_MOVED})


class WatchState(enum.Enum):
    EVENTS = "events"  # the system reports each change as it happens
    POLLING = "polling"  # re-read every poll_seconds: the system could not watch it
    UNAVAILABLE = "unavailable"  # not there, or unreadable: looked at again every recheck_seconds


def _covers(folder: str, path: str) -> bool:
    return path == folder or path.startswith(folder.rstrip(os.sep) + os.sep)


def _comparable(path: PathLike) -> str:
    return os.path.normcase(os.path.realpath(path))


@dataclass(frozen=True)
class _Place:
    """Where a root is watched: its folder (resolved), or a file's folder and the file."""

    folder: str
    file: str | None
    identity: tuple[int, int]  # the folder's (st_dev, st_ino): a folder made again in its place is another


def _locate(path: str, was_file: bool) -> _Place | str:
    """Where to watch the root at `path`, or why it cannot be watched. A file root that is gone is still
    watched in its folder, so that it is seen coming back."""
    resolved = os.path.realpath(path)
    file: str | None
    try:
        mode = Path(resolved).stat().st_mode
    except FileNotFoundError as exc:
        if not was_file:
            return exc.strerror or "not found"
        folder, file = str(Path(resolved).parent), resolved
    except OSError as exc:
        return exc.strerror or str(exc)
    else:
        if stat.S_ISDIR(mode):
            folder, file = resolved, None
        elif stat.S_ISREG(mode):
            folder, file = str(Path(resolved).parent), resolved
        else:
            return "neither a file nor a folder"
    try:
        info = Path(folder).stat()
    except OSError as exc:
        return exc.strerror or str(exc)
    if not os.access(folder, os.R_OK | os.X_OK):
        return "permission denied"
    return _Place(folder, file, (info.st_dev, info.st_ino))


class _Handler(FileSystemEventHandler):
    """One root's events, on an observer's thread: tells the watcher when one matters."""

    def __init__(
        self, root: _Root, place: _Place, ignored: tuple[str, ...], report: Callable[[_Root, bool], None]
    ) -> None:
        self._root = root
        self._place = place
        self._ignored = ignored
        self._report = report

    def dispatch(self, event: FileSystemEvent) -> None:
        kinds = _FOLDER_EVENTS if event.is_directory else _FILE_EVENTS
        if event.event_type not in kinds:
            return
        paths = [os.fsdecode(event.src_path)]
        if event.dest_path:
            paths.append(os.fsdecode(event.dest_path))
        if any(self._matters(path, event.is_directory) for path in paths):
            gone = self._place.file is None and paths[0] == self._place.folder
            self._report(self._root, gone and event.event_type in (EVENT_TYPE_DELETED, EVENT_TYPE_MOVED))

    def _matters(self, path: str, is_directory: bool) -> bool:
        if any(_covers(ignored, os.path.normcase(path)) for ignored in self._ignored):
            return False
        if self._place.file is not None:
            return path == self._place.file
        if not _covers(self._place.folder, path):
            return False
        if path == self._place.folder:
            return True
        parts = PurePath(path).relative_to(self._place.folder).parts
        if any(part.startswith(".") or leftover_name(part) for part in parts):
            return False
        return is_directory or known_by_name(parts[-1]) or not PurePath(parts[-1]).suffix


@dataclass(eq=False)
class _Root:
    path: str  # as the collection stores it
    collections: frozenset[str]
    state: WatchState = WatchState.UNAVAILABLE
    was_file: bool = False
    polled: bool = False  # the system could not watch it: polled from then on
    problem: str | None = None  # why it is unavailable, as logged
    place: _Place | None = None
    observer: BaseObserver | None = None
    watch: ObservedWatch | None = None
    handler: _Handler | None = None


@dataclass
class _Burst:
    first: float
    last: float


class CollectionWatcher:
    """Watches every collection's files and folders and calls `on_changed(name)` when one changed.

    `collections` is read when the watcher starts and on each `sync()`; call it after collections or their
    paths were added or removed. `ignore` holds folders whose changes never count (Hearth's home: indexing
    writes there). Start it with `start()` (or `with`); `stop()` waits for its threads to end.
    """

    def __init__(
        self,
        collections: CollectionStore,
        on_changed: Callable[[str], None],
        *,
        ignore: Iterable[PathLike] = (),
        quiet_seconds: float = 2.0,
        longest_wait_seconds: float = 30.0,
        recheck_seconds: float = 5.0,
        poll_seconds: float = 10.0,
    ) -> None:
        self._collections = collections
        self._on_changed = on_changed
        self._ignored = tuple(_comparable(path) for path in ignore)
        self._quiet = quiet_seconds
        self._longest = longest_wait_seconds
        self._recheck_every = recheck_seconds
        self._poll_every = poll_seconds
        # Shared with the observers' threads and callers of sync/stop/states: guarded by _cond.
        self._cond = threading.Condition()
        self._bursts: dict[str, _Burst] = {}
        self._sync_wanted = True
        self._recheck_at = 0.0
        self._stopping = False
        self._states: dict[str, WatchState] = {}
        # The watcher's thread only.
        self._roots: dict[str, _Root] = {}
        self._native: BaseObserver | None = None
        self._native_failed = False
        self._take_trouble: Callable[[], tuple[list[str], bool]] | None = None
        self._refused: list[str] = []
        self._polling: PollingObserver | None = None
        self._thread: threading.Thread | None = None

    # Public ------------------------------------------------------------------------------------------

    def start(self) -> None:
        """Start watching (the collections are read on the watcher's thread; this returns at once). A
        stopped watcher does not start again."""
        if self._thread is not None:
            return
        self._recheck_at = time.monotonic() + self._recheck_every
        self._thread = threading.Thread(target=self._run, name="hearth-collection-watch", daemon=True)
        self._thread.start()

    def sync(self) -> None:
        """Read the collections and their paths again (on the watcher's thread; this returns at once)."""
        with self._cond:
            self._sync_wanted = True
            self._cond.notify()

    def states(self) -> dict[str, WatchState]:
        """How each collection path is watched now, by the path as the collection stores it."""
        with self._cond:
            return dict(self._states)

    def stop(self) -> None:
        """Stop watching and wait for the watcher's threads, and watchdog's, to end. Changes noted but not
        yet told are dropped: the next refresh finds them anyway."""
        with self._cond:
            self._stopping = True
            self._cond.notify()
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        observers = [observer for observer in (self._native, self._polling) if observer is not None]
        for observer in observers:
            observer.stop()
        for observer in observers:
            observer.join()
        self._native = self._polling = None
        self._roots.clear()

    def __enter__(self) -> CollectionWatcher:
        self.start()
        return self

    def __exit__(self, *_exc: object) -> None:
        self.stop()

    # On the observers' threads ------------------------------------------------------------------------

    def _noted(self, root: _Root, gone: bool) -> None:
        now = time.monotonic()
        with self._cond:
            self._touch(root.collections, now)
            if gone:
                # Look at once, so that the root's going lands in the same burst as its files'.
                self._recheck_at = now
            self._cond.notify()

    def _touch(self, names: Iterable[str], now: float) -> None:
        """Under _cond."""
        for name in names:
            burst = self._bursts.get(name)
            if burst is None:
                self._bursts[name] = _Burst(now, now)
            else:
                burst.last = now

    # On the watcher's thread --------------------------------------------------------------------------

    def _run(self) -> None:
        while True:
            with self._cond:
                while True:
                    if self._stopping:
                        return
                    now = time.monotonic()
                    wake = min([self._recheck_at, *(self._deadline(b) for b in self._bursts.values())])
                    if self._sync_wanted or wake <= now:
                        break
                    self._cond.wait(wake - now)
                sync, self._sync_wanted = self._sync_wanted, False
                recheck = self._recheck_at <= now
                if recheck:
                    self._recheck_at = now + self._recheck_every
                due = sorted(
                    (name for name, burst in self._bursts.items() if self._deadline(burst) <= now),
                    key=lambda name: self._deadline(self._bursts[name]),
                )
                for name in due:
                    del self._bursts[name]
            try:
                if sync:
                    self._sync()
                if recheck:
                    self._recheck()
            except Exception:
                # Whatever watchdog raises for one root must not end the watching of all the others.
                log.exception("Watching the collections' folders failed")
            if sync or recheck:
                with self._cond:
                    self._states = {path: root.state for path, root in self._roots.items()}
            for name in due:
                with self._cond:
                    if self._stopping:
                        return
                try:
                    self._on_changed(name)
                except Exception:
                    # The caller's failure must not end the watching of every other collection.
                    log.exception("Telling that collection %r changed failed", name)

    def _deadline(self, burst: _Burst) -> float:
        return min(burst.last + self._quiet, burst.first + self._longest)

    def _sync(self) -> None:
        try:
            wanted = self._collections.roots()
        except Exception:
            # A database that cannot be read now (locked, or being restored) may be readable at the next sync.
            log.exception("Could not read the collections to watch")
            return
        names: dict[str, set[str]] = {}
        for name, paths in wanted.items():
            for path in paths:
                names.setdefault(path, set()).add(name)
        for path in [path for path in self._roots if path not in names]:
            self._detach(self._roots.pop(path))
        for path, collections in names.items():
            root = self._roots.get(path)
            if root is None:
                root = self._roots[path] = _Root(path, frozenset(collections))
                self._place(root, first=True)
            else:
                root.collections = frozenset(collections)
        with self._cond:
            for name in [name for name in self._bursts if name not in wanted]:
                del self._bursts[name]

    def _recheck(self) -> None:
        self._collect_trouble()
        refused, self._refused = self._refused, []
        for root in self._roots.values():
            place = root.place
            if place is not None and not root.polled and any(_covers(place.folder, p) for p in refused):
                # Changes in the folders the kernel refused went unseen until now.
                self._touch_now(root.collections)
                try:
                    self._to_polling(root, place)
                except OSError as exc:
                    self._unavailable(root, exc.strerror or str(exc), first=False)
            else:
                self._place(root, first=False)

    def _collect_trouble(self) -> None:
        if self._take_trouble is None:
            return
        refused, overflowed = self._take_trouble()
        self._refused.extend(refused)
        if overflowed:
            log.warning("The system dropped file change events; indexing the watched collections again")
            self._touch_now(
                name
                for root in self._roots.values()
                if root.observer is self._native
                for name in root.collections
            )

    def _touch_now(self, names: Iterable[str]) -> None:
        with self._cond:
            self._touch(names, time.monotonic())

    def _place(self, root: _Root, *, first: bool) -> None:
        """Watch the root where it is now, if that changed; tell its collections when it went or came back
        (not the first time: what was there is the refresh's to find)."""
        place = _locate(root.path, root.was_file)
        if isinstance(place, str):
            self._unavailable(root, place, first=first)
            return
        if place == root.place and self._alive(root):
            return
        self._detach(root)
        try:
            self._attach(root, place)
        except OSError as exc:
            self._unavailable(root, exc.strerror or str(exc), first=first)
            return
        if root.problem is not None:
            log.info("Watching %s for changes again", root.path)
            root.problem = None
        if not first:
            self._touch_now(root.collections)

    def _unavailable(self, root: _Root, why: str, *, first: bool) -> None:
        if root.problem != why:
            log.warning(
                "Not watching %s for changes (%s); looking again every %g s",
                root.path,
                why,
                self._recheck_every,
            )
            root.problem = why
        if root.state is not WatchState.UNAVAILABLE:
            self._detach(root)
            root.state = WatchState.UNAVAILABLE
            if not first:
                self._touch_now(root.collections)

    def _alive(self, root: _Root) -> bool:
        # An emitter ends by itself when its folder is deleted (inotify) or cannot be listed (polling).
        return root.observer is not None and any(
            emitter.watch == root.watch and emitter.is_alive() for emitter in root.observer.emitters
        )

    def _attach(self, root: _Root, place: _Place) -> None:
        root.was_file = place.file is not None
        if not root.polled:
            native = self._native_observer()
            if native is None:
                root.polled = True
            else:
                handler = self._handler(root, place)
                try:
                    watch = native.schedule(handler, place.folder, recursive=place.file is None)
                except OSError as exc:
                    if exc.errno != errno.ENOSPC:
                        raise
                    self._log_watch_limit(root)
                    root.polled = True
                else:
                    self._bind(root, place, native, watch, handler, WatchState.EVENTS)
                    self._collect_trouble()
                    if any(_covers(place.folder, path) for path in self._refused):
                        self._to_polling(root, place)
                    return
        self._attach_polling(root, place)

    def _to_polling(self, root: _Root, place: _Place) -> None:
        self._log_watch_limit(root)
        self._detach(root)
        root.polled = True
        self._refused = [path for path in self._refused if not _covers(place.folder, path)]
        self._attach_polling(root, place)

    def _attach_polling(self, root: _Root, place: _Place) -> None:
        if self._polling is None:
            self._polling = PollingObserver(timeout=self._poll_every)
            self._polling.start()
        handler = self._handler(root, place)
        watch = self._polling.schedule(handler, place.folder, recursive=place.file is None)
        self._bind(root, place, self._polling, watch, handler, WatchState.POLLING)

    def _handler(self, root: _Root, place: _Place) -> _Handler:
        return _Handler(root, place, self._ignored, self._noted)

    @staticmethod
    def _bind(
        root: _Root,
        place: _Place,
        observer: BaseObserver,
        watch: ObservedWatch,
        handler: _Handler,
        state: WatchState,
    ) -> None:
        root.place, root.state = place, state
        root.observer, root.watch, root.handler = observer, watch, handler

    def _detach(self, root: _Root) -> None:
        observer, watch, handler = root.observer, root.watch, root.handler
        root.place = root.observer = root.watch = root.handler = None
        if observer is None or watch is None or handler is None:
            return
        # Two roots can resolve to one folder (a link and its target): watchdog gives them one watch.
        if any(other.observer is observer and other.watch == watch for other in self._roots.values()):
            observer.remove_handler_for_watch(handler, watch)
        else:
            observer.unschedule(watch)

    def _native_observer(self) -> BaseObserver | None:
        if self._native is None and not self._native_failed:
            try:
                self._native = self._new_native_observer()
            except OSError as exc:
                self._native_failed = True
                log.warning(
                    "Watching collections by re-reading them every %g s: the system cannot watch more "
                    "folders (%s; on Linux, raise fs.inotify.max_user_instances)",
                    self._poll_every,
                    exc.strerror or exc,
                )
                return None
            self._native.start()
        return self._native

    def _new_native_observer(self) -> BaseObserver:
        if sys.platform.startswith("linux"):
            try:
                from app.documents.watch_linux import InotifyObserver
            except UnsupportedLibcError:
                return Observer()
            observer = InotifyObserver()
            self._take_trouble = observer.take_trouble
            return observer
        return Observer()

    def _log_watch_limit(self, root: _Root) -> None:
        try:
            limit = Path("/proc/sys/fs/inotify/max_user_watches").read_text(encoding="ascii").strip()
        except OSError:
            limit = "?"
        log.warning(
            "Watching %s for changes by re-reading it every %g s: the system's limit on watched folders is "
            "reached (fs.inotify.max_user_watches = %s; raise it to see changes at once)",
            root.path,
            self._poll_every,
            limit,
        )


__all__ = ["CollectionWatcher", "WatchState"]
