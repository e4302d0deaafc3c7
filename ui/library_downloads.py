"""The library panel's downloads: one row per download with live progress, pause/resume and cancel.

Rows only show what `LibraryService.downloadChanged` reports and say which button was pressed; the
service owns the transfers.
"""

from __future__ import annotations

from PySide6.QtCore import QEvent, Qt, Signal
from PySide6.QtWidgets import QHBoxLayout, QLabel, QProgressBar, QVBoxLayout, QWidget

from app.qt.library_service import DownloadPhase, DownloadState
from ui.library_widgets import format_bytes, plain_label, push_button

# The progress bar counts in KiB: QProgressBar takes an int, and a model can be larger than 2 GiB.
_KIB = 1024


def _eta(seconds: float) -> str:
    minutes, secs = divmod(int(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}" if hours else f"{minutes}:{secs:02d}"


class DownloadRow(QWidget):
    pauseClicked = Signal(str)
    resumeClicked = Signal(str)
    cancelClicked = Signal(str)

    def __init__(self, state: DownloadState, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("downloadRow")
        self.state = state
        self.title = QLabel()
        self.title.setTextFormat(Qt.TextFormat.PlainText)
        self.bar = QProgressBar()
        self.bar.setTextVisible(True)
        self.detail = plain_label("downloadDetail")
        self.detail.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.pauseButton = push_button("pauseDownload")
        self.cancelButton = push_button("cancelDownload")
        top = QHBoxLayout()
        top.addWidget(self.title, 1)
        top.addWidget(self.pauseButton)
        top.addWidget(self.cancelButton)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 4, 0, 4)
        layout.addLayout(top)
        layout.addWidget(self.bar)
        layout.addWidget(self.detail)
        self.pauseButton.clicked.connect(self._pause_or_resume)
        self.cancelButton.clicked.connect(lambda: self.cancelClicked.emit(self.state.key))
        self.show_state(state)

    def show_state(self, state: DownloadState) -> None:
        self.state = state
        self.title.setText(f"{state.repo_id} · {state.filename}")
        total_kib = max(state.total // _KIB, 1)
        self.bar.setRange(0, total_kib)
        self.bar.setValue(min(state.done // _KIB, total_kib))
        self.detail.setText(self._describe(state))
        self.pauseButton.setVisible(state.running or state.resumable)
        self.pauseButton.setText(
            self.tr("Pause")
            if state.running
            else self.tr("Retry")
            if state.state == DownloadPhase.FAILED
            else self.tr("Resume")
        )
        self.cancelButton.setVisible(state.running or state.resumable)
        self.cancelButton.setText(self.tr("Cancel"))

    def _describe(self, state: DownloadState) -> str:
        amount = self.tr("{done} of {total}").format(
            done=format_bytes(state.done), total=format_bytes(state.total)
        )
        if state.state == DownloadPhase.QUEUED:
            return self.tr("Waiting for another download to finish…")
        if state.state == DownloadPhase.DOWNLOADING:
            progress = state.progress
            if progress is None:
                return self.tr("Starting…")
            speed = f"{progress.speed_bps / (1 << 20):.1f} MiB/s"
            eta = _eta(progress.eta_s) if progress.eta_s is not None else "--:--"
            part = (
                self.tr(" · part {part} of {parts}").format(part=progress.part, parts=progress.parts)
                if progress.parts > 1
                else ""
            )
            return self.tr("{amount} · {speed} · {eta} left{part}").format(
                amount=amount, speed=speed, eta=eta, part=part
            )
        if state.state == DownloadPhase.PAUSED:
            return self.tr("Paused at {amount}; resume it now or after a restart.").format(amount=amount)
        if state.state == DownloadPhase.INSTALLED and state.installed is not None:
            return self.tr("Verified (SHA-256) and installed as {name}.").format(name=state.installed.name)
        if state.state == DownloadPhase.CANCELLED:
            return self.tr("Cancelled; the partial file was deleted.")
        if state.state == DownloadPhase.FAILED:
            return state.message
        return ""

    def _pause_or_resume(self) -> None:
        if self.state.running:
            self.pauseClicked.emit(self.state.key)
        else:
            self.resumeClicked.emit(self.state.key)

    def changeEvent(self, event: QEvent) -> None:
        if event.type() == QEvent.Type.LanguageChange:
            self.show_state(self.state)
        super().changeEvent(event)


class DownloadList(QWidget):
    """Rows in the order downloads started; finished and cancelled ones stay, saying how they ended."""

    pauseRequested = Signal(str)
    resumeRequested = Signal(str)
    cancelRequested = Signal(str)

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.rows: dict[str, DownloadRow] = {}
        self._layout = QVBoxLayout(self)
        self._layout.setContentsMargins(0, 0, 0, 0)
        self._layout.addStretch(1)

    def show_state(self, state: DownloadState) -> None:
        row = self.rows.get(state.key)
        if row is not None:
            row.show_state(state)
            return
        row = DownloadRow(state, self)
        row.pauseClicked.connect(self.pauseRequested)
        row.resumeClicked.connect(self.resumeRequested)
        row.cancelClicked.connect(self.cancelRequested)
        self.rows[state.key] = row
        self._layout.insertWidget(self._layout.count() - 1, row)
