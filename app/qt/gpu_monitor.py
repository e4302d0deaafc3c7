"""Live GPU memory for the status bar, probed about once a second off the GUI thread.

NVML initialisation and queries can take tens of milliseconds (more on a busy driver), so they run on
one worker thread; the GUI thread only starts the timer and receives the results. A probe still
running when the next tick comes is not doubled up: that tick is skipped.
"""

from __future__ import annotations

from collections.abc import Callable

from PySide6.QtCore import QObject, QTimer, Signal

from app.qt.background import Background
from inference.hardware import HardwareReport, probe_hardware

PROBE_INTERVAL_MS = 1_000


class GpuMonitor(QObject):
    """`status` carries a fresh `HardwareReport` (GPUs with used/free VRAM, or why there are none)."""

    status = Signal(object)

    def __init__(
        self,
        probe: Callable[[], HardwareReport] = probe_hardware,
        *,
        interval_ms: int = PROBE_INTERVAL_MS,
        parent: QObject | None = None,
    ) -> None:
        super().__init__(parent)
        self._probe = probe
        # A pool per start: what a pool stopped since delivers is recognised and dropped.
        self._pool: Background | None = None
        self._in_flight = False
        self.latest: HardwareReport | None = None
        self.probe_count = 0
        self._timer = QTimer(self)
        self._timer.setInterval(interval_ms)
        self._timer.timeout.connect(self._tick)

    @property
    def running(self) -> bool:
        return self._timer.isActive()

    def start(self) -> None:
        if self._pool is None:
            self._pool = Background("gpu")
        self._timer.start()
        self._tick()

    def stop(self) -> None:
        """Stops ticking and waits for a probe in flight, so no thread outlives the monitor."""
        self._timer.stop()
        pool, self._pool = self._pool, None
        if pool is not None:
            pool.shutdown()
        self._in_flight = False

    def _tick(self) -> None:
        pool = self._pool
        if self._in_flight or pool is None:
            return
        self._in_flight = True

        def failed(error: Exception) -> None:
            # probe_hardware never raises; a replacement might.
            self._probed(pool, HardwareReport((), f"GPU probe failed: {error}", 0, 0, 1, 1))

        pool.call(self._probe, lambda report: self._probed(pool, report), failed, operation="GPU probe")

    def _probed(self, pool: Background, report: HardwareReport) -> None:
        if pool is not self._pool:
            return
        self._in_flight = False
        self.latest = report
        self.probe_count += 1
        self.status.emit(report)
