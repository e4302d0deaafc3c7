"""The message box: Enter (or Ctrl+Enter) sends, Shift+Enter starts a new line."""

from __future__ import annotations

from PySide6.QtCore import QSize, Qt, Signal
from PySide6.QtGui import QKeyEvent
from PySide6.QtWidgets import QPlainTextEdit, QWidget

SEND_KEYS = (Qt.Key.Key_Return, Qt.Key.Key_Enter)


class Composer(QPlainTextEdit):
    submitted = Signal()

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("composer")
        self.setTabChangesFocus(True)

    def keyPressEvent(self, event: QKeyEvent) -> None:
        if event.key() in SEND_KEYS and not event.modifiers() & Qt.KeyboardModifier.ShiftModifier:
            event.accept()
            self.submitted.emit()
            return
        super().keyPressEvent(event)

    def sizeHint(self) -> QSize:
        lines = 4
        height = self.fontMetrics().lineSpacing() * lines + 2 * (self.frameWidth() + 8)
        return QSize(super().sizeHint().width(), height)
