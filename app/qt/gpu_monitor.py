"""Live GPU memory for the status bar, probed about once a second off the GUI thread.

NVML initialisation and queries can take tens of milliseconds (more on a busy driver), so they run on
one worker thread; the GUI thread only starts the timer and receives the results. A probe still
running when the next tick comes is not doubled up: that tick is skipped.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

from PySide6.QtCore import QObject, Qt, QTimer, Signal, Slot

from inference.hardware import HardwareReport, probe_hardware

log = logging.getLogger("hearth.gpu_monitor")

PROBE_INTERVAL_MS = 1_000


class GpuMonitor(QObject):
    """`status` carries a fresh `HardwareReport` (GPUs with used/free VRAM, or why there are none)."""

    status = Signal(object)
    _probed = Signal(object)

    def __init__(
        self,
        probe: Callable[[], HardwareReport] = probe_hardware,
        *,
        interval_ms: int = PROBE_INTERVAL_MS,
        parent: QObject | None = None,
    ) -> None:
        super().__init__(parent)
        self._probe = probe
        self._executor: ThreadPoolExecutor | None = None
        self._in_flight = False
        self.latest: HardwareReport | None = None
        self.probe_count = 0
        self._timer = QTimer(self)
        self._timer.setInterval(interval_ms)
        self._timer.timeout.connect(self._tick)
        # Queued: emitted on the worker thread, handled on ours.
        self._probed.connect(self._on_probed, Qt.ConnectionType.QueuedConnection)

    @property
    def running(self) -> bool:
        return self._timer.isActive()

    def start(self) -> None:
        if self._executor is None:
            self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="hearth-gpu")
        self._timer.start()
        self._tick()

    def stop(self) -> None:
        """Stops ticking and waits for a probe in flight, so no thread outlives the monitor."""
        self._timer.stop()
        executor, self._executor = self._executor, None
        if executor is not None:
            executor.shutdown(wait=True)
        self._in_flight = False

    def _tick(self) -> None:
        if self._in_flight or self._executor is None:
            return
        self._in_flight = True
        self._executor.submit(self._run_probe)

    def _run_probe(self) -> None:
        try:
            report = self._probe()
        except Exception as exc:  # probe_hardware never raises; a replacement might
            log.exception("GPU probe failed")
            report = HardwareReport((), f"GPU probe failed: {exc}", 0, 0, 1, 1)
        self._probed.emit(report)

    @Slot(object)
    def _on_probed(self, report: HardwareReport) -> None:
        self._in_flight = False
        if self._executor is None:
            return
        self.latest = report
        self.probe_count += 1
        self.status.emit(report)
