"""Documents…: the collections chats can answer from. Each one's files and folders, every file's status
(indexed, changed, waiting, failed with its reason, missing) and passages, and the pass indexing it, with
its progress and a Cancel.

The work happens in app.qt.documents_service off the GUI thread; this panel asks and shows the answers.
Errors go to the window's status line (the service's `failed`, connected by the window).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

from PySide6.QtCore import QCoreApplication, QEvent, Qt
from PySide6.QtGui import QShowEvent
from PySide6.QtWidgets import (
    QDialog,
    QDialogButtonBox,
    QGridLayout,
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QListWidget,
    QListWidgetItem,
    QProgressBar,
    QSplitter,
    QTreeWidget,
    QTreeWidgetItem,
    QVBoxLayout,
    QWidget,
)

from app.documents.collections import CollectionSummary
from app.documents.library import RefreshReport
from app.qt.documents_service import CollectionFiles, DocumentsService, FileEntry, IndexingProgress
from ui.dialogs import Dialogs
from ui.library_widgets import plain_label, push_button
from ui.servers_panel import plain_tooltip

NAME, FILES, PASSAGES = range(3)
PATH, STATUS, FILE_PASSAGES, REASON = range(4)


def status_text(status: str) -> str:
    """A file's status (app.storage.orm.COLLECTION_FILE_STATUSES) as the table shows it."""
    texts = {
        "indexed": QCoreApplication.translate("DocumentsPanel", "Indexed"),
        "changed": QCoreApplication.translate("DocumentsPanel", "Changed"),
        "pending": QCoreApplication.translate("DocumentsPanel", "Waiting"),
        "failed": QCoreApplication.translate("DocumentsPanel", "Failed"),
        "missing": QCoreApplication.translate("DocumentsPanel", "Missing"),
    }
    return texts.get(status, status)


def shown_path(path: str, roots: Sequence[str]) -> str:
    """A file as the table lists it: under the folder it was found in (named by its last part), or whole
    when it was added by itself."""
    for root in roots:
        if path != root and path.startswith(root.rstrip(os.sep) + os.sep):
            return str(Path(Path(root).name) / Path(path).relative_to(root))
    return path


class DocumentsPanel(QWidget):
    def __init__(
        self,
        service: DocumentsService,
        dialogs: Dialogs,
        *,
        read_only: bool = False,
        parent: QWidget | None = None,
    ) -> None:
        super().__init__(parent)
        self.setObjectName("documentsPanel")
        self._service = service
        self._dialogs = dialogs
        self._read_only = read_only
        # The collection shown on the right, and the one to select once it is listed (just created).
        self._shown: str | None = None
        self._select_next: str | None = None
        self._files: CollectionFiles | None = None
        # The file table's rows, by path, in the table's order.
        self._rows: dict[str, QTreeWidgetItem] = {}

        self.intro = plain_label("documentsIntro")
        self.collectionList = QTreeWidget()
        self.collectionList.setObjectName("collectionList")
        self.collectionList.setRootIsDecorated(False)
        self.collectionList.setUniformRowHeights(True)
        self.collectionList.header().setSectionResizeMode(QHeaderView.ResizeMode.ResizeToContents)
        self.emptyLabel = plain_label("noCollections")
        self.newButton = push_button("newCollection")
        self.deleteButton = push_button("deleteCollection")

        self.titleLabel = plain_label("collectionTitle")
        font = self.titleLabel.font()
        font.setBold(True)
        self.titleLabel.setFont(font)
        self.summaryLabel = plain_label("collectionSummary")
        self.rootsLabel = QLabel()
        self.rootList = QListWidget()
        self.rootList.setObjectName("collectionRoots")
        self.rootList.setMaximumHeight(90)
        self.rootsLabel.setBuddy(self.rootList)
        self.addFilesButton = push_button("addCollectionFiles")
        self.addFolderButton = push_button("addCollectionFolder")
        self.removePathButton = push_button("removeCollectionPath")
        self.refreshButton = push_button("refreshCollection")
        self.fileTable = QTreeWidget()
        self.fileTable.setObjectName("collectionFiles")
        self.fileTable.setRootIsDecorated(False)
        self.fileTable.setUniformRowHeights(True)
        self.fileTable.setSortingEnabled(False)
        header = self.fileTable.header()
        header.setSectionResizeMode(QHeaderView.ResizeMode.Interactive)
        header.setStretchLastSection(True)
        for column, width in ((PATH, 260), (STATUS, 90), (FILE_PASSAGES, 70)):
            header.resizeSection(column, width)

        self.progressRow = QWidget()
        self.progressRow.setObjectName("indexingProgress")
        self.progressBar = QProgressBar()
        self.progressBar.setObjectName("indexingBar")
        self.progressLabel = plain_label("indexingLabel")
        self.currentFileLabel = plain_label("indexingFile")
        self.currentFileLabel.setWordWrap(False)
        self.cancelButton = push_button("cancelIndexing")
        progress = QGridLayout(self.progressRow)
        progress.setContentsMargins(0, 0, 0, 0)
        progress.addWidget(self.progressBar, 0, 0)
        progress.addWidget(self.cancelButton, 0, 1)
        progress.addWidget(self.progressLabel, 1, 0, 1, 2)
        progress.addWidget(self.currentFileLabel, 2, 0, 1, 2)
        self.progressRow.hide()
        self.statusLabel = plain_label("documentsStatus")

        left = QWidget()
        left_layout = QVBoxLayout(left)
        left_layout.setContentsMargins(0, 0, 0, 0)
        left_layout.addWidget(self.collectionList, 1)
        left_layout.addWidget(self.emptyLabel)
        left_buttons = QHBoxLayout()
        left_buttons.addWidget(self.newButton)
        left_buttons.addWidget(self.deleteButton)
        left_layout.addLayout(left_buttons)

        right = QWidget()
        right_layout = QVBoxLayout(right)
        right_layout.setContentsMargins(0, 0, 0, 0)
        right_layout.addWidget(self.titleLabel)
        right_layout.addWidget(self.summaryLabel)
        right_layout.addWidget(self.rootsLabel)
        right_layout.addWidget(self.rootList)
        path_buttons = QHBoxLayout()
        for button in (self.addFilesButton, self.addFolderButton, self.removePathButton, self.refreshButton):
            path_buttons.addWidget(button)
        path_buttons.addStretch(1)
        right_layout.addLayout(path_buttons)
        right_layout.addWidget(self.fileTable, 1)

        self.splitter = QSplitter(Qt.Orientation.Horizontal)
        self.splitter.addWidget(left)
        self.splitter.addWidget(right)
        self.splitter.setStretchFactor(1, 1)
        self.splitter.setSizes([220, 620])
        self.splitter.setChildrenCollapsible(False)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addWidget(self.intro)
        layout.addWidget(self.splitter, 1)
        layout.addWidget(self.progressRow)
        layout.addWidget(self.statusLabel)

        self.collectionList.itemSelectionChanged.connect(self._on_selected)
        self.rootList.itemSelectionChanged.connect(self._update_buttons)
        self.newButton.clicked.connect(self.new_collection)
        self.deleteButton.clicked.connect(self.delete_collection)
        self.addFilesButton.clicked.connect(self.add_files)
        self.addFolderButton.clicked.connect(self.add_folder)
        self.removePathButton.clicked.connect(self.remove_path)
        self.refreshButton.clicked.connect(self.refresh)
        self.cancelButton.clicked.connect(self.cancel)
        service.collectionsChanged.connect(self._show_collections)
        service.filesListed.connect(self._show_files)
        service.created.connect(self._on_created)
        service.removed.connect(self._on_removed)
        service.indexingStarted.connect(lambda _name: self._show_progress())
        service.progressed.connect(self._on_progress)
        service.indexingFinished.connect(self._on_finished)
        self.retranslate()
        # Connected first, then read: a change signalled in between is not missed.
        self._show_collections(service.collections())
        self._show_progress()
        service.reload()

    def retranslate(self) -> None:
        self.intro.setText(
            self.tr(
                "A collection is a set of files and folders that chats can answer from. Hearth reads them "
                "where they are (nothing is copied) and keeps a searchable index of their text."
            )
        )
        self.collectionList.setHeaderLabels([self.tr("Collection"), self.tr("Files"), self.tr("Passages")])
        self.emptyLabel.setText(self.tr("No collections yet."))
        self.newButton.setText(self.tr("&New collection…"))
        self.deleteButton.setText(self.tr("&Delete collection…"))
        self.rootsLabel.setText(self.tr("Files and folders"))
        self.addFilesButton.setText(self.tr("Add &files…"))
        self.addFolderButton.setText(self.tr("Add f&older…"))
        self.removePathButton.setText(self.tr("&Remove selected path"))
        self.removePathButton.setToolTip(
            self.tr("Take it out of the collection; the files themselves are not touched")
        )
        self.refreshButton.setText(self.tr("Refres&h"))
        self.refreshButton.setToolTip(self.tr("Index the files that are new or changed since the last time"))
        self.cancelButton.setText(self.tr("&Cancel"))
        self.cancelButton.setToolTip(self.tr("Stop indexing; what is indexed stays indexed"))
        self.fileTable.setHeaderLabels(
            [self.tr("File"), self.tr("Status"), self.tr("Passages"), self.tr("Reason")]
        )
        self._fill_table()
        self._show_selected_collection()
        self._show_progress()

    def changeEvent(self, event: QEvent) -> None:
        if event.type() == QEvent.Type.LanguageChange:
            self.retranslate()
        super().changeEvent(event)

    # -- what is shown -------------------------------------------------------------------------------

    def selected(self) -> str | None:
        items = self.collectionList.selectedItems()
        return str(items[0].data(NAME, Qt.ItemDataRole.UserRole)) if items else None

    def selected_root(self) -> str | None:
        items = self.rootList.selectedItems()
        return str(items[0].data(Qt.ItemDataRole.UserRole)) if items else None

    def _show_collections(self, summaries: Sequence[CollectionSummary]) -> None:
        chosen = self._select_next or self.selected()
        view = self.collectionList
        view.blockSignals(True)
        view.clear()
        for summary in summaries:
            counts = summary.files
            item = QTreeWidgetItem(
                [
                    summary.name,
                    self.tr("{indexed} of {total}").format(indexed=counts.indexed, total=counts.total),
                    str(summary.chunks),
                ]
            )
            item.setData(NAME, Qt.ItemDataRole.UserRole, summary.name)
            view.addTopLevelItem(item)
            if summary.name == chosen:
                item.setSelected(True)
        first = view.topLevelItem(0)
        if not view.selectedItems() and first is not None:
            first.setSelected(True)
        view.blockSignals(False)
        if self._select_next in {s.name for s in summaries}:
            self._select_next = None
        view.setVisible(bool(summaries))
        self.emptyLabel.setVisible(not summaries)
        self._on_selected()

    def _on_selected(self) -> None:
        name = self.selected()
        if name != self._shown:
            self._shown = name
            self._files = None
            self.rootList.clear()
            self._fill_table()
            if name is not None:
                # A look at the disk too: files changed since the last pass show as changed.
                self._service.load_files(name, check=True)
        self._show_selected_collection()

    def _show_selected_collection(self) -> None:
        name = self._shown
        self.titleLabel.setText(name or "")
        self.summaryLabel.setText(self._summary_text())
        self._update_buttons()

    def _summary_text(self) -> str:
        """From the files as last listed (newer, while a pass runs, than the collections' list)."""
        listed = self._files
        if listed is None or listed.name != self._shown:
            return ""
        statuses = [entry.status for entry in listed.files]
        parts = [
            self.tr("%n file(s)", "", len(statuses)),
            self.tr("{count} indexed").format(count=statuses.count("indexed")),
        ]
        to_index = statuses.count("pending") + statuses.count("changed")
        if to_index:
            parts.append(self.tr("{count} to index").format(count=to_index))
        if "failed" in statuses:
            parts.append(self.tr("{count} failed").format(count=statuses.count("failed")))
        if "missing" in statuses:
            parts.append(self.tr("{count} missing").format(count=statuses.count("missing")))
        passages = sum(entry.passages or 0 for entry in listed.files if entry.status != "missing")
        parts.append(self.tr("%n passage(s)", "", passages))
        return " · ".join(parts)

    def _show_files(self, listed: CollectionFiles) -> None:
        if listed.name != self._shown:
            return
        self._files = listed
        chosen_root = self.selected_root()
        self.rootList.blockSignals(True)
        self.rootList.clear()
        for root in listed.roots:
            item = QListWidgetItem(root)
            item.setData(Qt.ItemDataRole.UserRole, root)
            item.setToolTip(plain_tooltip(root))
            self.rootList.addItem(item)
            if root == chosen_root:
                item.setSelected(True)
        self.rootList.blockSignals(False)
        self._fill_table()
        self._show_selected_collection()

    def _fill_table(self) -> None:
        """Rows are made once per file and updated in place: a pass lists the files again after each
        one, and a collection can hold thousands."""
        listed = self._files
        table = self.fileTable
        if listed is None:
            table.clear()
            self._rows = {}
            return
        if [entry.path for entry in listed.files] != list(self._rows):
            table.clear()
            self._rows = {entry.path: self._new_row(entry, listed.roots) for entry in listed.files}
            table.addTopLevelItems(list(self._rows.values()))
        progress = self._service.indexing
        current = progress.path if progress is not None and progress.collection == listed.name else ""
        for entry in listed.files:
            self._show_row(self._rows[entry.path], entry, current)

    @staticmethod
    def _new_row(entry: FileEntry, roots: Sequence[str]) -> QTreeWidgetItem:
        item = QTreeWidgetItem([shown_path(entry.path, roots), "", "", ""])
        item.setData(PATH, Qt.ItemDataRole.UserRole, entry.path)
        item.setToolTip(PATH, plain_tooltip(entry.path))
        item.setTextAlignment(FILE_PASSAGES, Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)
        return item

    def _show_row(self, item: QTreeWidgetItem, entry: FileEntry, current: str) -> None:
        status = self.tr("Indexing…") if entry.path == current else status_text(entry.status)
        passages = str(entry.passages) if entry.passages is not None else ""
        reason = entry.error or ""
        shown = (status, passages, reason)
        if (item.text(STATUS), item.text(FILE_PASSAGES), item.text(REASON)) == shown:
            return
        item.setText(STATUS, status)
        item.setText(FILE_PASSAGES, passages)
        item.setText(REASON, reason)
        item.setToolTip(REASON, plain_tooltip(reason))

    def file_rows(self) -> dict[str, tuple[str, str, str, str]]:
        """The table as shown, by full path: (shown path, status, passages, reason)."""
        rows = {}
        for index in range(self.fileTable.topLevelItemCount()):
            item = self.fileTable.topLevelItem(index)
            assert item is not None
            path = str(item.data(PATH, Qt.ItemDataRole.UserRole))
            rows[path] = (item.text(PATH), item.text(STATUS), item.text(FILE_PASSAGES), item.text(REASON))
        return rows

    def _update_buttons(self) -> None:
        writable = not self._read_only
        chosen = self._shown is not None and writable
        self.newButton.setEnabled(writable)
        for button in (self.deleteButton, self.addFilesButton, self.addFolderButton, self.refreshButton):
            button.setEnabled(chosen)
        self.removePathButton.setEnabled(chosen and self.selected_root() is not None)

    # -- indexing ------------------------------------------------------------------------------------

    def _show_progress(self) -> None:
        progress = self._service.indexing
        self.progressRow.setVisible(progress is not None)
        if progress is None:
            return
        waiting = [name for name in self._service.waiting() if name != progress.collection]
        if progress.total == 0:
            # The scan is still looking for what changed.
            self.progressBar.setRange(0, 0)
            text = self.tr("Looking for changes in {collection}…").format(collection=progress.collection)
        else:
            self.progressBar.setRange(0, progress.total)
            self.progressBar.setValue(progress.done)
            text = self.tr("Indexing {collection}: {done} of {total} files, {passages} passages").format(
                collection=progress.collection,
                done=progress.done,
                total=progress.total,
                passages=progress.passages,
            )
        if waiting:
            text += " " + self.tr("(then: {names})").format(names=", ".join(waiting))
        self.progressLabel.setText(text)
        self.currentFileLabel.setText(progress.path)
        self.currentFileLabel.setToolTip(plain_tooltip(progress.path))
        self.cancelButton.setEnabled(True)

    def _on_progress(self, step: IndexingProgress) -> None:
        self._show_progress()
        if step.collection == self._shown:
            # The file before this one has its status now.
            self._service.load_files(step.collection)

    def _on_finished(self, name: str, report: RefreshReport | None) -> None:
        self._show_progress()
        if report is not None:
            self.statusLabel.setText(self._report_text(report))
        if name == self._shown:
            self._service.load_files(name)

    def _report_text(self, report: RefreshReport) -> str:
        parts = [
            self.tr("{count} indexed").format(count=report.indexed),
            self.tr("{count} failed").format(count=len(report.failed)),
            self.tr("{count} unchanged").format(count=report.unchanged),
        ]
        if report.missing:
            parts.append(self.tr("{count} missing").format(count=report.missing))
        if report.cancelled:
            return self.tr("{collection}: cancelled; {counts}").format(
                collection=report.collection, counts=", ".join(parts)
            )
        return self.tr("{collection}: {counts}").format(collection=report.collection, counts=", ".join(parts))

    # -- what the user asks for ----------------------------------------------------------------------

    def new_collection(self) -> None:
        name = self._dialogs.ask(self, self.tr("New collection"), self.tr("Name of the collection:"), "")
        if name is None:
            return
        self.statusLabel.clear()
        self._service.create(name)

    def delete_collection(self) -> None:
        name = self._shown
        if name is None:
            return
        question = self.tr(
            "Delete the collection “{name}” and its index? Your files stay where they are; chats stop "
            "answering from it."
        ).format(name=name)
        if self._dialogs.confirm(self, self.tr("Delete collection"), question, self.tr("Delete")):
            self._service.remove(name)

    def add_files(self) -> None:
        name = self._shown
        if name is None:
            return
        paths = self._dialogs.ask_open_many(self, self.tr("Add files to {name}").format(name=name))
        if paths:
            self._service.add_paths(name, paths)

    def add_folder(self) -> None:
        name = self._shown
        if name is None:
            return
        folder = self._dialogs.ask_folder(self, self.tr("Add a folder to {name}").format(name=name))
        if folder is not None:
            self._service.add_paths(name, [folder])

    def remove_path(self) -> None:
        name, root = self._shown, self.selected_root()
        if name is not None and root is not None:
            self._service.remove_paths(name, [root])

    def look_again(self) -> None:
        """Read the collections and the disk afresh (the panel opened again: files may have changed)."""
        self._service.reload()
        if self._shown is not None:
            self._service.load_files(self._shown, check=True)

    def refresh(self) -> None:
        if self._shown is not None:
            self.statusLabel.clear()
            self._service.refresh_in_background(self._shown)
            self._show_progress()

    def cancel(self) -> None:
        progress = self._service.indexing
        if progress is not None:
            self._service.cancel(progress.collection)
            self.cancelButton.setEnabled(False)
            self.progressLabel.setText(self.tr("Stopping…"))

    # -- the answers ---------------------------------------------------------------------------------

    def _on_created(self, name: str) -> None:
        self._select_next = name
        self.statusLabel.setText(self.tr("Created {name}: add files or folders to it.").format(name=name))

    def _on_removed(self, name: str) -> None:
        self.statusLabel.setText(self.tr("Deleted {name}.").format(name=name))


class DocumentsDialog(QDialog):
    def __init__(
        self,
        service: DocumentsService,
        dialogs: Dialogs,
        *,
        read_only: bool = False,
        parent: QWidget | None = None,
    ) -> None:
        super().__init__(parent)
        self.setObjectName("documentsDialog")
        self.panel = DocumentsPanel(service, dialogs, read_only=read_only)
        self._opened = False
        buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Close)
        buttons.rejected.connect(self.reject)
        layout = QVBoxLayout(self)
        layout.addWidget(self.panel)
        layout.addWidget(buttons)
        self.resize(900, 560)
        self.retranslate()

    def retranslate(self) -> None:
        self.setWindowTitle(self.tr("Documents"))

    def showEvent(self, event: QShowEvent) -> None:
        # Opened again: files may have changed since (the panel read everything when it was made).
        if self._opened and not event.spontaneous():
            self.panel.look_again()
        self._opened = True
        super().showEvent(event)

    def changeEvent(self, event: QEvent) -> None:
        if event.type() == QEvent.Type.LanguageChange:
            self.retranslate()
        super().changeEvent(event)
