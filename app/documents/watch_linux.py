"""inotify for the collection watcher (Linux only): watchdog's inotify observer, plus what it does not say.

The kernel lets each user hold fs.inotify.max_user_watches watches, one per folder. When they run out,
watchdog raises for the top folder of a tree but leaves the folders below it unwatched without a word; and
when the kernel's event queue overflows, watchdog watches the tree again but cannot say what changed
meanwhile. The collection watcher needs both: the first to poll that tree instead, the second to have the
collections indexed again.
"""

from __future__ import annotations

import errno
import os
import threading

from watchdog.observers.api import BaseObserver
from watchdog.observers.inotify import InotifyEmitter
from watchdog.observers.inotify_c import (
    CallbackId,
    InotifyEvent,
    InotifyFD,
    Mask,
    WatchCallback,
    WatchDescriptor,
)


class _RecordingInotifyFD(InotifyFD):
    def __init__(self) -> None:
        super().__init__()
        self._record_lock = threading.Lock()
        self._refused: list[str] = []
        self._overflowed = False

    def add_callback(
        self, path: bytes, mask: Mask, callback: WatchCallback, id_: CallbackId
    ) -> WatchDescriptor:
        try:
            return super().add_callback(path, mask, callback, id_)
        except OSError as exc:
            if exc.errno == errno.ENOSPC:
                with self._record_lock:
                    self._refused.append(os.fsdecode(path))
            raise

    def handle_event(self, event: InotifyEvent) -> None:
        if event.is_queue_overflow:
            with self._record_lock:
                self._overflowed = True
        super().handle_event(event)

    def take(self) -> tuple[list[str], bool]:
        with self._record_lock:
            refused, overflowed = self._refused, self._overflowed
            self._refused, self._overflowed = [], False
        return refused, overflowed


class InotifyObserver(BaseObserver):
    """watchdog.observers.inotify.InotifyObserver, on an inotify instance that records its troubles.
    Creating it raises OSError (EMFILE) when the user's fs.inotify.max_user_instances are all taken."""

    def __init__(self) -> None:
        self._inotify = _RecordingInotifyFD()
        self._inotify.start()
        super().__init__(InotifyEmitter, inotify_fd=self._inotify)

    def take_trouble(self) -> tuple[list[str], bool]:
        """The folders the kernel refused to watch for lack of watches, and whether it dropped events,
        since the last call."""
        return self._inotify.take()

    def on_thread_stop(self) -> None:
        super().on_thread_stop()
        self._inotify.stop()
        self._inotify.join()
