"""GGUF files and folders dropped on the window: copied into the library one after another, off the GUI
thread, with the bytes done, a Cancel, and what became of each (imported, already there, or why not).

Copying and hashing a model takes minutes for a big one: it runs on a thread of its own that ends with the
work, and Cancel (or closing the window) stops it at its next chunk, leaving no partial copy behind
(ModelLibrary.import_file removes them).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Sequence
from pathlib import Path

from PySide6.QtCore import QObject, Qt, Signal, SignalInstance
from PySide6.QtGui import QCloseEvent
from PySide6.QtWidgets import QDialog, QLabel, QProgressBar, QPushButton, QVBoxLayout, QWidget

from app.errors import HearthError
from app.library.installed import ModelLibrary
from app.model_scan.dropped import dropped_models
from app.qt.background import describe
from ui.library_widgets import format_bytes

log = logging.getLogger("hearth.ui")
# A cancelled copy stops at its next 4 MB chunk; a slow disk is given this long.
STOP_WAIT_S = 30.0


class _Cancelled(Exception):
    """Raised from the copy's progress when the user cancels: the import stops at its next chunk."""


class ModelImporter(QObject):
    """Imports on a thread of their own; what happens arrives as signals on the GUI thread."""

    progress = Signal(str, int, int)  # (file name, bytes done, bytes in all)
    outcome = Signal(str)  # a sentence about one file
    finished = Signal(bool)  # whether any model was imported

    def __init__(self, library: ModelLibrary, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self._library = library
        self._cancel = threading.Event()
        self._thread: threading.Thread | None = None

    @property
    def busy(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def start(self, paths: Sequence[Path]) -> None:
        # Phrased here: the import thread does not translate.
        phrases = {
            "imported": self.tr("Imported {name}."),
            "already": self.tr("{file} is already in the library as {name}."),
            "failed": self.tr("{file} was not imported: {reason}"),
            "none": self.tr("Nothing to import: no GGUF models among what was dropped."),
            "cancelled": self.tr("Cancelled: {file} was not imported, and nothing of it was kept."),
        }
        self._cancel = cancel = threading.Event()
        self._thread = threading.Thread(
            target=self._work, args=(list(paths), phrases, cancel), name="hearth-model-import"
        )
        self._thread.start()

    def cancel(self) -> None:
        self._cancel.set()

    def wait(self, timeout_s: float) -> None:
        if self._thread is not None:
            self._thread.join(timeout_s)

    def _work(self, paths: list[Path], phrases: dict[str, str], cancel: threading.Event) -> None:
        imported = False
        try:
            models, notes = dropped_models(paths)
            for note in notes:
                self._say(note)
            if not models:
                self._say(phrases["none"])
            for path in models:
                if cancel.is_set():
                    break
                imported |= self._import_one(path, phrases, cancel)
        except Exception as exc:  # a bug, not the user's file: said, and logged with its traceback
            log.exception("importing dropped models failed")
            self._say(describe(exc))
        finally:
            self._emit(self.finished, imported)

    def _import_one(self, path: Path, phrases: dict[str, str], cancel: threading.Event) -> bool:
        def copied(done: int, total: int) -> None:
            if cancel.is_set():
                raise _Cancelled
            self._emit(self.progress, path.name, done, total)

        before = {model.name for model in self._library.list_models()}
        try:
            model = self._library.import_file(path, progress=copied)
        except _Cancelled:
            self._say(phrases["cancelled"].format(file=path.name))
            return False
        except HearthError as exc:
            self._say(phrases["failed"].format(file=path.name, reason=exc))
            return False
        if model.name in before:
            self._say(phrases["already"].format(file=path.name, name=model.name))
            return False
        self._say(phrases["imported"].format(name=model.name))
        return True

    def _say(self, text: str) -> None:
        self._emit(self.outcome, text)

    @staticmethod
    def _emit(signal: SignalInstance, *args: object) -> None:
        try:
            signal.emit(*args)
        except RuntimeError:
            log.debug("model import report dropped: its window is gone")


class ModelImportDialog(QDialog):
    """What the drop imports, as it goes; Cancel stops the file being copied, Close once it is done."""

    def __init__(self, importer: ModelImporter, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("modelImportDialog")
        self.setWindowTitle(self.tr("Importing models"))
        self.resize(520, 220)
        self._importer = importer
        self.fileLabel = QLabel()
        self.fileLabel.setObjectName("importFile")
        self.fileLabel.setTextFormat(Qt.TextFormat.PlainText)
        self.progressBar = QProgressBar()
        self.progressBar.setObjectName("importProgress")
        self.progressBar.setRange(0, 1000)
        self.outcomesLabel = QLabel()
        self.outcomesLabel.setObjectName("importOutcomes")
        self.outcomesLabel.setTextFormat(Qt.TextFormat.PlainText)
        self.outcomesLabel.setWordWrap(True)
        self.button = QPushButton()
        self.button.setObjectName("importButton")
        self.button.clicked.connect(self._button_clicked)
        layout = QVBoxLayout(self)
        layout.addWidget(self.fileLabel)
        layout.addWidget(self.progressBar)
        layout.addWidget(self.outcomesLabel, 1)
        layout.addWidget(self.button, 0, Qt.AlignmentFlag.AlignRight)
        self._outcomes: list[str] = []
        # Until `finished` arrives: what the import thread said before it is shown by then.
        self._running = False
        importer.progress.connect(self._show_progress)
        importer.outcome.connect(self._show_outcome)
        importer.finished.connect(self._finished)

    def start(self, paths: Sequence[Path]) -> None:
        self._outcomes = []
        self.outcomesLabel.setText("")
        self.fileLabel.setText(self.tr("Looking for models…"))
        self.progressBar.setValue(0)
        self.button.setText(self.tr("Cancel"))
        self._running = True
        self._importer.start(paths)

    def _show_progress(self, name: str, done: int, total: int) -> None:
        self.fileLabel.setText(
            self.tr("{file}: {done} of {total}").format(
                file=name, done=format_bytes(done), total=format_bytes(total)
            )
        )
        self.progressBar.setValue(int(1000 * done / total) if total else 0)

    def _show_outcome(self, text: str) -> None:
        self._outcomes.append(text)
        self.outcomesLabel.setText("\n".join(self._outcomes))

    def _finished(self, _imported: bool) -> None:
        self._running = False
        self.fileLabel.setText(self.tr("Done."))
        self.progressBar.setValue(1000)
        self.button.setText(self.tr("Close"))

    @property
    def busy(self) -> bool:
        return self._running

    @property
    def importer(self) -> ModelImporter:
        return self._importer

    def stop(self) -> None:
        """Cancel what is being copied and wait for the copy to let go of its files."""
        self._importer.cancel()
        self._importer.wait(STOP_WAIT_S)

    def _button_clicked(self) -> None:
        if self._importer.busy:
            self._importer.cancel()
        else:
            self.accept()

    def closeEvent(self, event: QCloseEvent) -> None:
        # Closed mid-copy: the copy stops, and nothing of it stays.
        self._importer.cancel()
        super().closeEvent(event)
