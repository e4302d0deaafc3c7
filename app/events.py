"""Change notification for the Qt-free models: a list of callbacks, called in order on the emitting thread.

Qt signals would tie the models to Qt; these are small enough to test without an event loop, and a Qt
widget connects to them like to any Python callable.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Generic, TypeVar

T = TypeVar("T")


class Event(Generic[T]):
    """Something that happened to a model, with one value describing it."""

    def __init__(self) -> None:
        self._callbacks: list[Callable[[T], object]] = []

    def connect(self, callback: Callable[[T], object]) -> Callable[[], None]:
        """Call `callback` on every emit from now on; returns what disconnects it again."""
        self._callbacks.append(callback)
        return lambda: self.disconnect(callback)

    def disconnect(self, callback: Callable[[T], object]) -> None:
        if callback in self._callbacks:
            self._callbacks.remove(callback)

    def emit(self, value: T) -> None:
        # A copy: a callback may disconnect itself (or connect another) while the event is delivered.
        for callback in list(self._callbacks):
            callback(value)
