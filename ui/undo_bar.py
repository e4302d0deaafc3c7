"""The "Chat deleted — Undo" bar: the delete waits in the trash until this bar expires (or Hearth quits)."""

from __future__ import annotations

import time

from PySide6.QtCore import Qt, QTimer, Signal
from PySide6.QtWidgets import QFrame, QHBoxLayout, QLabel, QPushButton, QWidget

UNDO_MS = 10_000


class UndoBar(QFrame):
    """`undoRequested(conversation_id)` on Undo; `expired(conversation_id)` when the time is up."""

    undoRequested = Signal(int)
    expired = Signal(int)

    def __init__(self, parent: QWidget | None = None, *, timeout_ms: int = UNDO_MS) -> None:
        super().__init__(parent)
        self.setObjectName("undoBar")
        self.timeout_ms = timeout_ms
        self.conversation_id: int | None = None
        self._title = ""
        self._deadline = 0.0
        self.label = QLabel()
        self.label.setObjectName("undoLabel")
        self.label.setTextFormat(Qt.TextFormat.PlainText)
        self.undoButton = QPushButton()
        self.undoButton.setObjectName("undoButton")
        self.undoButton.clicked.connect(self._undo)
        layout = QHBoxLayout(self)
        layout.setContentsMargins(10, 4, 6, 4)
        layout.addWidget(self.label, 1)
        layout.addWidget(self.undoButton)
        self._expiry = QTimer(self)
        self._expiry.setSingleShot(True)
        self._expiry.timeout.connect(self._expire)
        self._tick = QTimer(self)
        self._tick.setInterval(250)
        self._tick.timeout.connect(self._render)
        self.retranslate()
        self.hide()

    def retranslate(self) -> None:
        self.undoButton.setText(self.tr("Undo"))
        self._render()

    def show_deleted(self, conversation_id: int, title: str) -> None:
        """Offer to undo this delete. An earlier offer still showing expires now (its chat is purged)."""
        if self.conversation_id is not None and self.conversation_id != conversation_id:
            self._expire()
        self.conversation_id = conversation_id
        self._title = title
        self._deadline = time.monotonic() + self.timeout_ms / 1000
        self._expiry.start(self.timeout_ms)
        self._tick.start()
        self._render()
        self.show()

    def seconds_left(self) -> int:
        return max(0, round(self._deadline - time.monotonic()))

    def _render(self) -> None:
        if self.conversation_id is None:
            self.label.clear()
            return
        self.label.setText(
            self.tr("Chat “{title}” deleted ({seconds} s)").format(
                title=self._title, seconds=self.seconds_left()
            )
        )

    def _undo(self) -> None:
        conversation_id = self._stop()
        if conversation_id is not None:
            self.undoRequested.emit(conversation_id)

    def _expire(self) -> None:
        conversation_id = self._stop()
        if conversation_id is not None:
            self.expired.emit(conversation_id)

    def _stop(self) -> int | None:
        conversation_id, self.conversation_id = self.conversation_id, None
        self._expiry.stop()
        self._tick.stop()
        self.hide()
        return conversation_id

    def expire_now(self) -> None:
        """At exit: the pending delete becomes final."""
        self._expire()
