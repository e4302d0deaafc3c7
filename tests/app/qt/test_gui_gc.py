"""The GUI-thread garbage collector: while it runs, reference cycles are freed on the GUI thread, never on
a worker that happened to allocate."""

from __future__ import annotations

import gc
import threading
from typing import Any

from pytestqt.qtbot import QtBot

from app.qt.gui_gc import GuiThreadGarbageCollector

FREED_ON: list[str] = []


class Cycle:
    """Refers to itself, so only the cyclic collector frees it; says on which thread that happened."""

    def __init__(self) -> None:
        self.me: Any = self

    def __del__(self) -> None:
        FREED_ON.append(threading.current_thread().name)


def test_cycles_made_and_dropped_by_a_worker_are_freed_on_the_gui_thread(qtbot: QtBot) -> None:
    gc.enable()  # as in the app: the collector itself turns automatic collection off
    collector = GuiThreadGarbageCollector(interval_ms=10)
    try:
        assert not gc.isenabled()
        FREED_ON.clear()

        def churn() -> None:
            # Far more than generation 0's threshold: automatic collection would run here, on this thread.
            for _ in range(20_000):
                Cycle()

        worker = threading.Thread(target=churn, name="worker")
        worker.start()
        worker.join()
        assert FREED_ON == []
        qtbot.waitUntil(lambda: len(FREED_ON) > 0, timeout=5000)
        assert set(FREED_ON) == {threading.main_thread().name}
    finally:
        collector.stop()
    assert gc.isenabled()
