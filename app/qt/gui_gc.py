"""Python's cyclic garbage collector, run on the GUI thread only.

Left automatic, a collection runs in whichever thread happens to allocate: a background worker reading the
database can be the one that frees a window (or any QObject) left in a reference cycle. Its C++ destructor
then runs on that thread, takes Qt's signal-slot mutex and waits for the GIL, while the GUI thread holds
the GIL and waits for that mutex in its next `connect`: both stop for good (seen in the test suite, a
window of one test collected by the collections worker of the next). So the automatic collector is off
while the app runs and a timer on the GUI thread collects, by the same per-generation thresholds
(pyqtgraph's GarbageCollector does the same).
"""

from __future__ import annotations

import gc

from PySide6.QtCore import QObject, QTimer

_INTERVAL_MS = 250


class GuiThreadGarbageCollector(QObject):
    """Create on the GUI thread; `stop` gives the collection back to Python."""

    def __init__(self, parent: QObject | None = None, *, interval_ms: int = _INTERVAL_MS) -> None:
        super().__init__(parent)
        self._thresholds = gc.get_threshold()
        gc.disable()
        self._timer = QTimer(self)
        self._timer.setInterval(interval_ms)
        self._timer.timeout.connect(self.collect_due)
        self._timer.start()

    def collect_due(self) -> None:
        """Collect the oldest generation whose count is over its threshold, as Python itself would."""
        counts = gc.get_count()
        for generation in (2, 1, 0):
            if counts[generation] > self._thresholds[generation]:
                gc.collect(generation)
                return

    def stop(self) -> None:
        self._timer.stop()
        gc.enable()
