"""Files attached to the message being written: the chips above the composer, reading files off the GUI
thread, dropping and pasting files; and opening a stored attachment or a reply's source passage.

Strings are translated in the "Attachments" context (literal in each call: lupdate reads only literals).
"""

from __future__ import annotations

import logging
import shutil
import stat
from collections.abc import Callable, Sequence
from datetime import datetime
from functools import partial
from pathlib import Path

import shiboken6
from PySide6.QtCore import (
    QT_TRANSLATE_NOOP,
    QBuffer,
    QByteArray,
    QCoreApplication,
    QEvent,
    QIODevice,
    QMimeData,
    QObject,
    Qt,
    Signal,
)
from PySide6.QtGui import QDragEnterEvent, QDropEvent, QImage, QImageWriter
from PySide6.QtWidgets import (
    QDialog,
    QDialogButtonBox,
    QFileDialog,
    QFrame,
    QHBoxLayout,
    QLabel,
    QPlainTextEdit,
    QPushButton,
    QToolButton,
    QVBoxLayout,
    QWidget,
)

from app.documents.library import Attachment, DocumentLibrary
from app.documents.model import human_size
from app.errors import HearthError
from app.qt.background import Background, describe
from ui.servers_panel import plain_tooltip

log = logging.getLogger("hearth.ui.attachments")

# Shown for a kind (app.documents.model.DocumentKind) on chips; format names stay as they are.
KIND_LABELS: dict[str, object] = {
    "pdf": "PDF",
    "docx": "Word",
    "xlsx": "Excel",
    "csv": "CSV",
    "pptx": "PowerPoint",
    "html": "HTML",
    "markdown": "Markdown",
    "text": QT_TRANSLATE_NOOP("Attachments", "Text"),
    "code": QT_TRANSLATE_NOOP("Attachments", "Code"),
    "epub": "EPUB",
    "image": QT_TRANSLATE_NOOP("Attachments", "Image"),
}


def describe_file(name: str, kind: str | None, size_bytes: int | None, pages: int | None) -> str:
    """A chip's text: "report.pdf · PDF · 120 KB · 3 pages" (what is known of it)."""
    parts = [name]
    if kind:
        parts.append(QCoreApplication.translate("Attachments", str(KIND_LABELS.get(kind, kind))))
    if size_bytes is not None:
        parts.append(human_size(size_bytes))
    if pages:
        parts.append(
            QCoreApplication.translate("Attachments", "1 page")
            if pages == 1
            else QCoreApplication.translate("Attachments", "{count} pages").format(count=pages)
        )
    return " · ".join(parts)


def local_files(mime: QMimeData) -> list[Path]:
    """The local files dragged or pasted (a link to a web page is not a file to attach)."""
    if not mime.hasUrls():
        return []
    return [Path(url.toLocalFile()) for url in mime.urls() if url.isLocalFile()]


class FileChip(QFrame):
    """One attached file above the composer, with its × to take it off the message."""

    removed = Signal()

    def __init__(self, attachment: Attachment, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("attachmentChip")
        self.attachment = attachment
        self.label = QLabel(
            describe_file(attachment.name, attachment.kind, attachment.size_bytes, attachment.pages)
        )
        self.label.setTextFormat(Qt.TextFormat.PlainText)
        self.removeButton = QToolButton()
        self.removeButton.setObjectName("removeAttachmentButton")
        self.removeButton.setText("×")
        self.removeButton.setToolTip(
            QCoreApplication.translate("Attachments", "Remove this file from the message")
        )
        self.removeButton.setAutoRaise(True)
        self.removeButton.clicked.connect(self.removed)
        layout = QHBoxLayout(self)
        layout.setContentsMargins(8, 2, 2, 2)
        layout.addWidget(self.label)
        layout.addWidget(self.removeButton)


class AttachmentTray(QWidget):
    """The files going with the next message. `changed` whenever a file is added, removed or still being
    read (Send waits while one is)."""

    changed = Signal()

    def __init__(
        self,
        documents: DocumentLibrary,
        worker: Background,
        show_error: Callable[[str], None],
        images_refused: Callable[[], str | None] = lambda: None,
        parent: QWidget | None = None,
    ) -> None:
        """`images_refused` says why the chat's model cannot see images (None when it can): an image is then
        refused when it is attached, before anything is stored, with that sentence."""
        super().__init__(parent)
        self.setObjectName("attachmentTray")
        self._documents = documents
        self._worker = worker
        self._show_error = show_error
        self._images_refused = images_refused
        self._reading = 0
        self.chips: list[FileChip] = []
        self.attachButton = QPushButton()
        self.attachButton.setObjectName("attachButton")
        self.attachButton.clicked.connect(self.choose_files)
        self.readingLabel = QLabel()
        self.readingLabel.setObjectName("attachmentsReading")
        self.readingLabel.hide()
        self._row = QHBoxLayout(self)
        self._row.setContentsMargins(0, 0, 0, 0)
        self._row.addWidget(self.attachButton)
        self._row.addWidget(self.readingLabel)
        self._row.addStretch(1)
        self.retranslate()

    def retranslate(self) -> None:
        self.attachButton.setText(QCoreApplication.translate("Attachments", "Attach files…"))
        self.show_image_support()
        self._show_reading()

    def show_image_support(self) -> None:
        """The button's tooltip says whether the chat's model takes images, and why not (call when the
        model changes)."""
        refused = self._images_refused()
        tip = QCoreApplication.translate(
            "Attachments",
            "Attach documents, or images for a model that can see, to the next message (you can also drop or "
            "paste files)",
        )
        if refused is not None:
            tip += "\n" + QCoreApplication.translate("Attachments", "Images: {why}").format(why=refused)
        self.attachButton.setToolTip(plain_tooltip(tip))

    @property
    def reading(self) -> bool:
        """Files are still being read: sending now would leave them out."""
        return self._reading > 0

    def attachments(self) -> tuple[Attachment, ...]:
        return tuple(chip.attachment for chip in self.chips)

    def choose_files(self) -> None:
        names, _filter = QFileDialog.getOpenFileNames(
            self, QCoreApplication.translate("Attachments", "Attach files")
        )
        self.attach_paths([Path(name) for name in names])

    def attach_paths(self, paths: Sequence[Path]) -> None:
        """Read and store each file off the GUI thread; each becomes a chip, or its error is shown."""
        refused = self._images_refused()
        for path in paths:
            self._reading += 1
            self._worker.call(
                partial(self._documents.attach, path, images_refused=refused),
                self._attached,
                self._failed,
                operation="attaching a file",
            )
        if paths:
            self._show_reading()
            self.changed.emit()

    def attach_image(self, image: QImage) -> None:
        """A pasted picture: encoded as PNG and stored off the GUI thread (a screenshot takes a while)."""
        refused = self._images_refused()
        name = QCoreApplication.translate("Attachments", "Pasted image {time}.png").format(
            time=datetime.now().strftime("%Y-%m-%d %H.%M.%S")
        )
        copy = image.copy()  # the clipboard's image may change while the worker encodes this one
        self._reading += 1
        self._worker.call(
            lambda: self._documents.attach_image_bytes(_png_bytes(copy), name, images_refused=refused),
            self._attached,
            self._failed,
            operation="attaching a pasted image",
        )
        self._show_reading()
        self.changed.emit()

    def restore(self, attachments: Sequence[Attachment]) -> None:
        """Files of a message that was never sent, back on the next one."""
        for attachment in attachments:
            self._add(attachment)
        if attachments:
            self.changed.emit()

    def set_attachments(self, attachments: Sequence[Attachment]) -> None:
        """These files and no others: those of a message being edited, or those it held back."""
        self._drop_chips()
        for attachment in attachments:
            self._add(attachment)
        self.changed.emit()

    def clear(self) -> None:
        self._drop_chips()
        self.changed.emit()

    def _drop_chips(self) -> None:
        for chip in self.chips:
            # Out of the row now: chips added before the event loop deletes these go where they belong.
            self._row.removeWidget(chip)
            chip.hide()
            chip.deleteLater()
        self.chips = []

    def _attached(self, attachment: Attachment) -> None:
        if not shiboken6.isValid(self):
            return
        self._reading -= 1
        # The same file twice is one attachment (it is stored once, by content).
        if attachment.sha256 not in {a.sha256 for a in self.attachments()}:
            self._add(attachment)
        self._show_reading()
        self.changed.emit()

    def _failed(self, error: Exception) -> None:
        if not shiboken6.isValid(self):
            return
        self._reading -= 1
        self._show_reading()
        self._show_error(describe(error))
        self.changed.emit()

    def _add(self, attachment: Attachment) -> None:
        chip = FileChip(attachment)
        chip.removed.connect(lambda chip=chip: self._remove(chip))
        self.chips.append(chip)
        # After the button and the chips before it, before the reading label.
        self._row.insertWidget(len(self.chips), chip)

    def _remove(self, chip: FileChip) -> None:
        self.chips.remove(chip)
        self._row.removeWidget(chip)
        chip.hide()
        chip.deleteLater()
        # Off the message, so no longer kept for it: the next release takes it unless a message holds it.
        self._documents.files.unpin([chip.attachment.sha256])
        self.changed.emit()

    def _show_reading(self) -> None:
        self.readingLabel.setVisible(self._reading > 0)
        self.readingLabel.setText(QCoreApplication.translate("Attachments", "Reading files…"))


def _png_bytes(image: QImage) -> bytes:
    buffer = QBuffer()
    buffer.open(QIODevice.OpenModeFlag.WriteOnly)
    writer = QImageWriter(buffer, QByteArray(b"PNG"))
    if not writer.write(image):
        raise HearthError(f"The pasted image could not be read ({writer.errorString()}).")
    return bytes(buffer.data().data())


class FileDrops(QObject):
    """Files dropped on a widget (the transcript's viewport) are attached; other drops pass through."""

    def __init__(self, attach: Callable[[Sequence[Path]], None], parent: QObject | None = None) -> None:
        super().__init__(parent)
        self._attach = attach

    def eventFilter(self, watched: QObject, event: QEvent) -> bool:
        if event.type() in (QEvent.Type.DragEnter, QEvent.Type.DragMove):
            assert isinstance(event, QDragEnterEvent | QDropEvent)
            if local_files(event.mimeData()):
                event.acceptProposedAction()
                return True
        elif event.type() == QEvent.Type.Drop:
            assert isinstance(event, QDropEvent)
            files = local_files(event.mimeData())
            if files:
                event.acceptProposedAction()
                self._attach(files)
                return True
        return super().eventFilter(watched, event)


def openable_copy(stored: Path, name: str, opened_dir: Path) -> Path:
    """A read-only copy of a stored attachment under its original name, for the system to open.

    The stored file is named by its hash, with no extension, so the system could not pick the right
    application for it; and an application that writes back to what it opened must not change the copy
    the conversation refers to (its hash would no longer match). The copy lives in the Hearth home, not
    the system's temporary folder, so it stays with the rest of the user's data; the next start removes
    it (`forget_opened_copies`).
    """
    if not stored.is_file():
        raise FileNotFoundError(stored)
    safe = Path(name).name.strip() or "attachment"
    target = opened_dir / stored.name[:16] / safe
    if not target.exists():
        target.parent.mkdir(parents=True, exist_ok=True)
        partial = target.with_name(target.name + ".partial")
        shutil.copyfile(stored, partial)
        partial.chmod(stat.S_IRUSR | stat.S_IRGRP)
        partial.replace(target)
    return target


def forget_opened_copies(opened_dir: Path) -> None:
    """Remove the copies made for opening attachments in an earlier session (an application may still
    have this session's open), so a deleted conversation's files do not stay behind there for long."""
    shutil.rmtree(opened_dir, ignore_errors=True)


class PassageDialog(QDialog):
    """A passage a reply was given: its file, where it is in the file, its text; and a way to the file."""

    def __init__(
        self,
        name: str,
        location: str,
        text: str,
        open_file: Callable[[], None] | None,
        parent: QWidget | None = None,
    ) -> None:
        super().__init__(parent)
        self.setObjectName("passageDialog")
        self.setWindowTitle(QCoreApplication.translate("Attachments", "Source passage"))
        self.fileLabel = QLabel(f"{name} — {location}" if location else name)
        self.fileLabel.setObjectName("passageFile")
        self.fileLabel.setTextFormat(Qt.TextFormat.PlainText)
        self.fileLabel.setWordWrap(True)
        self.passage = QPlainTextEdit(text)
        self.passage.setObjectName("passageText")
        self.passage.setReadOnly(True)
        buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Close)
        buttons.rejected.connect(self.reject)
        self.openButton = QPushButton(QCoreApplication.translate("Attachments", "Open file"))
        self.openButton.setObjectName("openPassageFile")
        if open_file is None:
            # A collection's file is where the user keeps it; only stored attachments can be opened here.
            self.openButton.setEnabled(False)
            self.openButton.setToolTip(
                QCoreApplication.translate(
                    "Attachments", "This file is in a collection, not stored with the chat"
                )
            )
        else:
            self.openButton.clicked.connect(open_file)
        buttons.addButton(self.openButton, QDialogButtonBox.ButtonRole.ActionRole)
        layout = QVBoxLayout(self)
        layout.addWidget(self.fileLabel)
        layout.addWidget(self.passage, 1)
        layout.addWidget(buttons)
        self.resize(560, 380)
