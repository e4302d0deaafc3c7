"""Models other apps downloaded: the library panel's "Find models from other apps" window.

Scanning (folders and headers) and adding (hashing every byte once) run on a thread of their own, one per
call: it ends with its work, so nothing waits idle when the window closes, and closing stops a hash at
its next chunk. Names, paths and reasons come from other apps' files: every label is plain text.
"""

from __future__ import annotations

import html
import logging
import threading
from collections.abc import Callable, Sequence
from pathlib import Path

from PySide6.QtCore import QCoreApplication, QEvent, QObject, Qt, Signal, SignalInstance
from PySide6.QtGui import QBrush, QCloseEvent, QColor
from PySide6.QtWidgets import (
    QAbstractItemView,
    QDialog,
    QHBoxLayout,
    QHeaderView,
    QProgressBar,
    QTableWidget,
    QTableWidgetItem,
    QVBoxLayout,
    QWidget,
)

from app.library.installed import InstalledModel, ModelLibrary
from app.model_scan import Added, FoundModel, ScanResult, add_found, list_folders, scan_models
from app.qt.background import describe
from ui.library_widgets import format_bytes, plain_label, push_button
from ui.theme import resolve_theme

log = logging.getLogger("hearth.model_scan")

# Product names, not translated; the user's own folders are named in ModelScanDialog._app_name.
APP_NAMES = {
    "ollama": "Ollama",
    "lmstudio": "LM Studio",
    "hf-cache": "Hugging Face cache",
    "gpt4all": "GPT4All",
    "jan": "Jan",
}
FOUND_ROLE = Qt.ItemDataRole.UserRole


class _Stopped(Exception):
    """Raised from the hashing progress when the window closes: the add stops at its next chunk."""


class ScanWorker(QObject):
    """Scans, adds and missing-file checks off the GUI thread; results arrive as signals on it."""

    scanned = Signal(object)  # ScanResult
    hashing = Signal(str, int, int)  # (model name, bytes hashed, bytes in all)
    added = Signal(object)  # list[Added]
    missing = Signal(object)  # set[str]: the names of installed models with a file gone
    failed = Signal(str)

    def __init__(self, library: ModelLibrary, home: Path, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self._library = library
        self._home = home
        self._stop = threading.Event()  # the running add's
        self._threads: list[threading.Thread] = []
        app = QCoreApplication.instance()
        if app is not None:
            app.aboutToQuit.connect(self.stop)

    @property
    def busy(self) -> bool:
        return any(t.is_alive() for t in self._threads)

    def scan(self) -> None:
        self._run(lambda: _send(self.scanned, scan_models(self._library, list_folders(self._home))))

    def add(self, found: Sequence[FoundModel]) -> None:
        stop = self._stop = threading.Event()

        def progress(model: FoundModel, done: int, total: int) -> None:
            if stop.is_set():
                raise _Stopped
            _send(self.hashing, model.name, done, total)

        self._run(lambda: _send(self.added, add_found(self._library, list(found), progress)))

    def check_missing(self, models: Sequence[InstalledModel]) -> None:
        self._run(lambda: _send(self.missing, {m.name for m in models if m.missing_files()}))

    def stop(self) -> None:
        """Stop hashing at the next chunk; what was added stays."""
        self._stop.set()

    def _run(self, work: Callable[[], None]) -> None:
        def job() -> None:
            try:
                work()
            except _Stopped:
                return
            except Exception as exc:
                log.exception("scanning for models failed")
                _send(self.failed, describe(exc))

        self._threads = [t for t in self._threads if t.is_alive()]
        thread = threading.Thread(target=job, name="hearth-model-scan")
        self._threads.append(thread)
        thread.start()


def _send(signal: SignalInstance, *args: object) -> None:
    try:
        signal.emit(*args)
    except RuntimeError:
        # The window closed while the thread ran: nobody is left to tell.
        log.debug("model scan result dropped: its window is gone")


def _item(text: str, *, align_right: bool = False) -> QTableWidgetItem:
    item = QTableWidgetItem(text)
    item.setFlags(item.flags() & ~Qt.ItemFlag.ItemIsEditable)
    if align_right:
        item.setTextAlignment(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)
    return item


class ModelScanDialog(QDialog):
    """The models other apps keep, each with its state; the ones ticked are added where they lie."""

    # The library changed (models were added): the panel lists it again.
    libraryChanged = Signal()

    def __init__(self, worker: ScanWorker, theme: str, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("modelScanDialog")
        self._theme = theme
        self._result: ScanResult | None = None
        # What the last add did, shown over the status of the scan that follows it.
        self._after_scan: str | None = None
        self.worker = worker
        self.introLabel = plain_label("scanIntro")
        self.table = QTableWidget(0, 5)
        self.table.setObjectName("scanTable")
        self.table.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
        self.table.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
        self.table.verticalHeader().hide()
        self.table.horizontalHeader().setSectionResizeMode(QHeaderView.ResizeMode.ResizeToContents)
        self.table.horizontalHeader().setStretchLastSection(True)
        self.progressBar = QProgressBar()
        self.progressBar.setObjectName("scanProgress")
        self.progressBar.hide()
        self.statusLabel = plain_label("scanStatus")
        self.rescanButton = push_button("rescanModels")
        self.addButton = push_button("addFoundModels")
        self.closeButton = push_button("closeScan")
        buttons = QHBoxLayout()
        buttons.addWidget(self.rescanButton)
        buttons.addStretch(1)
        buttons.addWidget(self.addButton)
        buttons.addWidget(self.closeButton)
        layout = QVBoxLayout(self)
        layout.addWidget(self.introLabel)
        layout.addWidget(self.table, 1)
        layout.addWidget(self.progressBar)
        layout.addWidget(self.statusLabel)
        layout.addLayout(buttons)
        self.resize(900, 480)

        self.rescanButton.clicked.connect(self.scan)
        self.addButton.clicked.connect(self.add_checked)
        self.closeButton.clicked.connect(self.close)
        self.table.itemChanged.connect(self._update_buttons)
        self.worker.scanned.connect(self.show_result)
        self.worker.hashing.connect(self._on_hashing)
        self.worker.added.connect(self._on_added)
        self.worker.failed.connect(self._on_failed)
        self.retranslate()

    def retranslate(self) -> None:
        self.setWindowTitle(self.tr("Models from other apps"))
        self.introLabel.setText(
            self.tr(
                "GGUF models that Ollama, LM Studio, the Hugging Face cache, GPT4All, Jan and your own "
                "folders keep on this computer. Adding one uses it where it is: nothing is copied, and "
                "Hearth never changes or deletes it (removing it from the library only forgets it)."
            )
        )
        self.table.setHorizontalHeaderLabels(
            [self.tr("Model"), self.tr("App"), self.tr("Size"), self.tr("State"), self.tr("Location")]
        )
        self.rescanButton.setText(self.tr("Scan again"))
        self.addButton.setText(self.tr("Add selected"))
        self.closeButton.setText(self.tr("Close"))
        if self._result is not None:
            self.show_result(self._result)

    def changeEvent(self, event: QEvent) -> None:
        if event.type() == QEvent.Type.LanguageChange:
            self.retranslate()
        super().changeEvent(event)

    def closeEvent(self, event: QCloseEvent) -> None:
        self.worker.stop()
        super().closeEvent(event)

    # -- scanning -------------------------------------------------------------------------------

    def scan(self) -> None:
        self.statusLabel.setText(self.tr("Looking in other apps' model folders…"))
        self._set_busy(True, determinate=False)
        self.worker.scan()

    def show_result(self, result: ScanResult) -> None:
        self._result = result
        self._set_busy(False)
        table = self.table
        table.blockSignals(True)
        try:
            table.setRowCount(0)
            for found in result.models:
                self._add_row(found)
        finally:
            table.blockSignals(False)
        looked = sum(1 for s in result.searched if s.exists)
        if self._after_scan is not None:
            self.statusLabel.setText(self._after_scan)
            self._after_scan = None
        elif not result.models:
            self.statusLabel.setText(
                self.tr("No GGUF models found in the {n} app folders on this computer.").format(n=looked)
            )
        else:
            self.statusLabel.setText(
                self.tr("{found} models found, {new} not in the library yet.").format(
                    found=len(result.models), new=len(result.addable)
                )
            )
        self._update_buttons()

    def _add_row(self, found: FoundModel) -> None:
        table = self.table
        row = table.rowCount()
        table.insertRow(row)
        name = _item(found.name)
        name.setData(FOUND_ROLE, row)
        state, why = self._state(found)
        state_item = _item(state)
        if why:
            state_item.setToolTip(f"<p>{html.escape(why)}</p>")
        if found.addable:
            name.setFlags(name.flags() | Qt.ItemFlag.ItemIsUserCheckable)
            name.setCheckState(Qt.CheckState.Checked)
        elif not found.usable:
            state_item.setForeground(QBrush(QColor(resolve_theme(self._theme).error)))
        location = _item(str(found.path))
        location.setToolTip(f"<p>{html.escape(str(found.path))}</p>")
        items = [
            name,
            _item(self._app_name(found.app)),
            _item(format_bytes(found.size_bytes), align_right=True),
            state_item,
            location,
        ]
        for index, item in enumerate(items):
            table.setItem(row, index, item)

    def _app_name(self, app: str) -> str:
        return APP_NAMES.get(app) or self.tr("Your folder")

    def _state(self, found: FoundModel) -> tuple[str, str | None]:
        """The state column's text and its tooltip."""
        if not found.usable:
            return self.tr("Cannot be used"), found.problem
        if found.in_library:
            return self.tr("In the library as {name}").format(name=found.library_name), None
        vision = self.tr(", with its vision projector") if found.projector is not None else ""
        return self.tr("New: adds as {name}{vision}").format(name=found.add_as, vision=vision), None

    # -- adding ---------------------------------------------------------------------------------

    def checked(self) -> list[FoundModel]:
        if self._result is None:
            return []
        chosen = []
        for row in range(self.table.rowCount()):
            item = self.table.item(row, 0)
            if item is not None and item.checkState() == Qt.CheckState.Checked:
                chosen.append(self._result.models[int(item.data(FOUND_ROLE))])
        return chosen

    def add_checked(self) -> None:
        chosen = self.checked()
        if not chosen:
            return
        self.statusLabel.setText(self.tr("Checking the models' SHA-256 (once)…"))
        self._set_busy(True, determinate=True)
        self.worker.add(chosen)

    def _on_hashing(self, name: str, done: int, total: int) -> None:
        # Megabytes: a progress bar's range is a C int, and models pass 2 GiB.
        self.progressBar.setRange(0, max(1, total >> 20))
        self.progressBar.setValue(done >> 20)
        self.statusLabel.setText(
            self.tr("Checking {name}: {done} of {total}…").format(
                name=name, done=format_bytes(done), total=format_bytes(total)
            )
        )

    def _on_added(self, results: list[Added]) -> None:
        self._set_busy(False)
        added = [r for r in results if r.added]
        failed = [r for r in results if r.error is not None]
        lines = [self.tr("Added {n} models to the library, where they are.").format(n=len(added))]
        lines += [
            self.tr("{name} was not added: {why}").format(name=r.found.name, why=r.error) for r in failed
        ]
        if added:
            self.libraryChanged.emit()
        self.scan()
        self._after_scan = "\n".join(lines)

    def _on_failed(self, message: str) -> None:
        self._set_busy(False)
        self.statusLabel.setText(message)

    def _set_busy(self, busy: bool, *, determinate: bool = False) -> None:
        self.progressBar.setVisible(busy)
        if busy:
            self.progressBar.setRange(0, 1 if determinate else 0)
            self.progressBar.setValue(0)
        self.rescanButton.setEnabled(not busy)
        self._update_buttons()

    def _update_buttons(self) -> None:
        self.addButton.setEnabled(not self.progressBar.isVisible() and bool(self.checked()))
