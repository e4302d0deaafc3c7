"""Run blocking calls (database, disk, keyring, network, inference) off the GUI thread: the one worker helper.

Each service owns named pools of `Background`, sized for its work (one worker keeps calls in order; more
let independent calls pass each other). Every call fails the same way: the exception is logged with the
operation's name on the worker thread, then handed to the caller's `on_error` or, without one, to the
pool's `failed` signal, on the thread that owns the pool (the GUI thread). Nothing is swallowed.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, TypeVar

from PySide6.QtCore import QObject, Qt, Signal, Slot

from app.errors import HearthError

T = TypeVar("T")
log = logging.getLogger("hearth.background")


def describe(error: Exception) -> str:
    """What a user is told: a HearthError's message is written for them, anything else is a bug."""
    return str(error) if isinstance(error, HearthError) else f"Unexpected error: {error}"


class Background(QObject):
    """A pool of `workers` threads named hearth-`name`; results and errors arrive on the owner's thread,
    after every signal the call itself emitted (Qt queues both in the order they were sent)."""

    # (operation, exception) of a call made without on_error.
    failed = Signal(str, object)
    _delivered = Signal(object, object, object)

    def __init__(self, name: str, workers: int = 1, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self._executor = ThreadPoolExecutor(max_workers=workers, thread_name_prefix=f"hearth-{name}")
        # Queued: the signal is emitted from the worker thread, the slot must run in ours.
        self._delivered.connect(self._deliver, Qt.ConnectionType.QueuedConnection)

    def call(
        self,
        fn: Callable[[], T],
        on_done: Callable[[T], None] | None = None,
        on_error: Callable[[Exception], None] | None = None,
        *,
        operation: str | None = None,
    ) -> Future[T]:
        """Run `fn` on a worker. `operation` names it in the log and the `failed` signal (by default, the
        function's qualified name). The future also holds the result or the exception, for callers that
        must act on the worker thread itself."""
        name = operation if operation is not None else str(getattr(fn, "__qualname__", fn))

        def job() -> T:
            try:
                result = fn()
            except Exception as exc:
                if isinstance(exc, HearthError):
                    log.info("%s failed: %s", name, exc)
                else:
                    log.exception("%s failed", name)
                self._delivered.emit(self._error_path(name, on_error), None, exc)
                raise
            self._delivered.emit(on_done, result, None)
            return result

        return self._executor.submit(job)

    def _error_path(
        self, operation: str, on_error: Callable[[Exception], None] | None
    ) -> Callable[[Exception], None]:
        if on_error is not None:
            return on_error
        return lambda error: self.failed.emit(operation, error)

    @Slot(object, object, object)
    def _deliver(self, callback: Callable[..., Any] | None, result: object, error: Exception | None) -> None:
        if callback is None:
            return
        callback(error if error is not None else result)

    def shutdown(self, *, cancel_pending: bool = False) -> None:
        """Blocking: until the running calls end. `cancel_pending`: calls not started yet never run (and
        deliver nothing); otherwise they run first."""
        self._executor.shutdown(wait=True, cancel_futures=cancel_pending)
