"""The message box: Enter (or Ctrl+Enter) sends, Shift+Enter starts a new line; files dropped or pasted
on it are offered for attaching (`filesDropped`) instead of going in as their paths, and a pasted picture
that is no file (a screenshot) as `imagePasted`."""

from __future__ import annotations

from PySide6.QtCore import QMimeData, QSize, Qt, Signal
from PySide6.QtGui import QImage, QKeyEvent
from PySide6.QtWidgets import QPlainTextEdit, QWidget

from ui.attachments import local_files

SEND_KEYS = (Qt.Key.Key_Return, Qt.Key.Key_Enter)


class Composer(QPlainTextEdit):
    submitted = Signal()
    # list[pathlib.Path]: local files dropped or pasted.
    filesDropped = Signal(list)
    # QImage: a picture pasted from the clipboard without a file behind it.
    imagePasted = Signal(QImage)

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

    def canInsertFromMimeData(self, source: QMimeData) -> bool:
        return bool(local_files(source)) or source.hasImage() or super().canInsertFromMimeData(source)

    def insertFromMimeData(self, source: QMimeData) -> None:
        # Both paste and drop land here; a copied file would otherwise paste as its path.
        files = local_files(source)
        if files:
            self.filesDropped.emit(files)
            return
        if source.hasImage():
            image = source.imageData()
            if isinstance(image, QImage) and not image.isNull():
                self.imagePasted.emit(image)
                return
        super().insertFromMimeData(source)

    def sizeHint(self) -> QSize:
        lines = 4
        height = self.fontMetrics().lineSpacing() * lines + 2 * (self.frameWidth() + 8)
        return QSize(super().sizeHint().width(), height)
