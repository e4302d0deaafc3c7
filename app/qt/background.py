"""Run blocking calls (database, hashing, disk) off the GUI thread and deliver results on it."""

from __future__ import annotations

import logging
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, TypeVar

from PySide6.QtCore import QObject, Qt, Signal, Slot

T = TypeVar("T")
log = logging.getLogger("hearth.background")


class Background(QObject):
    """Callbacks run on the owner's (GUI) thread. One worker by default, which keeps database writes in
    order; more (`workers`) for independent calls that should not wait for each other."""

    _delivered = Signal(object, object, object)

    def __init__(self, parent: QObject | None = None, *, workers: int = 1) -> None:
        super().__init__(parent)
        self._executor = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="hearth-bg")
        # Queued: the signal is emitted from the worker thread, the slot must run in ours.
        self._delivered.connect(self._deliver, Qt.ConnectionType.QueuedConnection)

    def call(
        self,
        fn: Callable[[], T],
        on_done: Callable[[T], None] | None = None,
        on_error: Callable[[Exception], None] | None = None,
    ) -> Future[T]:
        def job() -> T:
            try:
                result = fn()
            except Exception as exc:
                log.exception("background call failed")
                self._delivered.emit(on_error, None, exc)
                raise
            self._delivered.emit(on_done, result, None)
            return result

        return self._executor.submit(job)

    @Slot(object, object, object)
    def _deliver(self, callback: Callable[..., Any] | None, result: object, error: Exception | None) -> None:
        if callback is None:
            return
        callback(error if error is not None else result)

    def shutdown(self) -> None:
        self._executor.shutdown(wait=True, cancel_futures=False)
