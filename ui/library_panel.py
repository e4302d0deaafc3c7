"""The model library: search the Hub, see how each quantization fits before downloading, download with
live progress, find the models other apps downloaded, and load, verify or delete installed models.

Widgets only: every search, listing, download, hash and delete is the library service's, on its worker
threads; the panel asks and shows the answers. Repo ids, licences, file names and error messages come
from the Hub, so every label here is plain text and every tooltip is escaped.
"""

from __future__ import annotations

import html
from collections.abc import Sequence

from PySide6.QtCore import QEvent, Qt, QTimer
from PySide6.QtGui import QBrush, QColor, QFont
from PySide6.QtWidgets import (
    QAbstractItemView,
    QDialog,
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QLineEdit,
    QProgressBar,
    QScrollArea,
    QSpinBox,
    QSplitter,
    QStackedWidget,
    QTableWidget,
    QTableWidgetItem,
    QVBoxLayout,
    QWidget,
)

from app.errors import HearthError
from app.library.hub import RepoSummary, check_repo_id
from app.library.installed import STARTER_SOURCE, InstalledModel
from app.library.model_ops import DiskUsage, FileFit, RepoAssessment
from app.library.recommended import RecommendedFit
from app.library.updates import ModelUpdate, UpdateReport
from app.model_scan import ScanResult
from app.qt.library_service import DownloadState, UpdateOutcome
from app.qt.services import AppServices
from app.secret_store import SecretStatus
from inference.estimator import Fit, FitEstimate
from inference.hardware import HardwareReport
from ui.dialogs import ConfirmAction, confirm_action
from ui.library_downloads import DownloadList
from ui.library_recommended import RecommendedList
from ui.library_scan import ModelScanDialog, ScanWorker
from ui.library_widgets import format_bytes, plain_label, push_button
from ui.model_load_settings import ModelLoadSettingsDialog
from ui.settings_dialog import SettingsDialog
from ui.theme import Theme, resolve_theme

# Re-assessing waits until the user stops typing in the what-if fields.
REASSESS_DELAY_MS = 400
# The spin boxes' lowest value stands for "this machine" (no override).
NO_OVERRIDE = -1
MAX_OVERRIDE_MIB = 16 * 1024 * 1024
DATA_ROLE = Qt.ItemDataRole.UserRole
RECOMMENDED_ROLE = Qt.ItemDataRole.UserRole + 1


def _tooltip(text: str) -> str:
    # Qt treats a tooltip that looks like HTML as rich text; this one is always escaped rich text.
    return f"<p>{html.escape(text)}</p>" if text else ""


def _table(object_name: str, columns: int) -> QTableWidget:
    table = QTableWidget(0, columns)
    table.setObjectName(object_name)
    table.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
    table.setSelectionMode(QAbstractItemView.SelectionMode.SingleSelection)
    table.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
    table.verticalHeader().hide()
    table.horizontalHeader().setSectionResizeMode(QHeaderView.ResizeMode.ResizeToContents)
    table.horizontalHeader().setStretchLastSection(True)
    return table


def _item(text: str, data: object = None, *, align_right: bool = False) -> QTableWidgetItem:
    item = QTableWidgetItem(text)
    if data is not None:
        item.setData(DATA_ROLE, data)
    if align_right:
        item.setTextAlignment(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)
    return item


def _row_data(table: QTableWidget, row: int) -> object:
    """What the row's first cell holds for the panel (a repo id, a fit's index, a model name)."""
    item = table.item(row, 0)
    return item.data(DATA_ROLE) if item is not None else None


def _is_repo_id(text: str) -> bool:
    try:
        check_repo_id(text)
    except HearthError:
        return False
    return True


def _count(n: int | None) -> str:
    return f"{n:,}" if n is not None else "?"


class LibraryPanel(QWidget):
    def __init__(
        self,
        services: AppServices,
        *,
        confirm: ConfirmAction = confirm_action,
        parent: QWidget | None = None,
    ) -> None:
        super().__init__(parent)
        self.setObjectName("libraryPanel")
        self._services = services
        self._library = services.library_service
        self._confirm = confirm
        self._assessment: RepoAssessment | None = None
        self._opened_repo: str | None = None
        self._models: list[InstalledModel] = []
        # Verifying, deleting or loading a model: one at a time from here.
        self._busy = False
        self._settings: SettingsDialog | None = None
        # Installed models with a file gone (registered where another app keeps it, then moved).
        self._missing: set[str] = set()
        # The last update check's findings, by model name, and the models updating now.
        self._updates: dict[str, ModelUpdate] = {}
        self._updating: set[str] = set()
        self._scan_worker = ScanWorker(services.library, services.paths.home, self)
        self._scan_dialog: ModelScanDialog | None = None
        # One installed model's load settings at a time; reused for the next model opened.
        self._load_settings_dialog: ModelLoadSettingsDialog | None = None
        self._build()
        self._connect()
        self.retranslate()
        for state in self._library.downloads():
            self.downloads.show_state(state)
        self._library.load_recommended()
        if self._library.last_load_report is not None:
            self._on_load_report(*self._library.last_load_report)
        self._library.refresh()
        if (report := self._library.last_update_report()) is not None:
            self._on_updates_checked(report, False)
        # The saved last check's badges without the network; the daily check when it is due.
        self._library.load_updates()
        if not services.settings.models_scan_offered:
            # Shown once, and only when other apps have models the library lacks.
            self._scan_worker.scanned.connect(self._offer_found)
            self._scan_worker.scan()

    # -- construction ---------------------------------------------------------------------------

    def _build(self) -> None:
        self.searchBox = QLineEdit()
        self.searchBox.setObjectName("librarySearch")
        self.searchButton = push_button("librarySearchButton")
        self.hubSettingsButton = push_button("hubSettingsButton")
        search_row = QHBoxLayout()
        search_row.addWidget(self.searchBox, 1)
        search_row.addWidget(self.searchButton)
        search_row.addWidget(self.hubSettingsButton)
        self.resultsTable = _table("resultsTable", 5)
        # Before any search, and again once the search box is cleared: a place to start.
        self.recommended = RecommendedList(lambda fit: self._badge(fit, self._theme()), self._theme)
        self.searchStack = QStackedWidget()
        self.searchStack.setObjectName("searchStack")
        self.searchStack.addWidget(self.recommended)
        self.searchStack.addWidget(self.resultsTable)
        self.searchStatus = plain_label("searchStatus")
        search = QWidget()
        search_layout = QVBoxLayout(search)
        search_layout.setContentsMargins(0, 0, 0, 0)
        search_layout.addLayout(search_row)
        search_layout.addWidget(self.searchStack, 1)
        search_layout.addWidget(self.searchStatus)

        self.vramLabel = QLabel()
        self.vramSpin = self._override_spin("vramOverride")
        self.vramLabel.setBuddy(self.vramSpin)
        self.ramLabel = QLabel()
        self.ramSpin = self._override_spin("ramOverride")
        self.ramLabel.setBuddy(self.ramSpin)
        plan_row = QHBoxLayout()
        plan_row.addWidget(self.vramLabel)
        plan_row.addWidget(self.vramSpin)
        plan_row.addWidget(self.ramLabel)
        plan_row.addWidget(self.ramSpin)
        plan_row.addStretch(1)
        self.repoLabel = plain_label("repoLabel")
        self.repoMessage = plain_label("repoMessage")
        self.quantTable = _table("quantTable", 6)
        self.downloadButton = push_button("downloadButton")
        self.downloadButton.setEnabled(False)
        download_row = QHBoxLayout()
        download_row.addStretch(1)
        download_row.addWidget(self.downloadButton)
        self.downloads = DownloadList()
        scroll = QScrollArea()
        scroll.setWidgetResizable(True)
        scroll.setWidget(self.downloads)
        repo = QWidget()
        repo_layout = QVBoxLayout(repo)
        repo_layout.setContentsMargins(0, 0, 0, 0)
        repo_layout.addLayout(plan_row)
        repo_layout.addWidget(self.repoLabel)
        repo_layout.addWidget(self.quantTable, 1)
        repo_layout.addWidget(self.repoMessage)
        repo_layout.addLayout(download_row)
        repo_layout.addWidget(scroll)

        self.installedTable = _table("installedTable", 4)
        self.loadButton = push_button("loadModel")
        self.verifyButton = push_button("verifyModel")
        self.deleteButton = push_button("deleteModel")
        self.loadSettingsButton = push_button("modelLoadSettings")
        self.scanButton = push_button("findModels")
        self.checkUpdatesButton = push_button("checkUpdates")
        self.updateButton = push_button("updateModel")
        self.diskLabel = plain_label("diskLabel")
        actions = QHBoxLayout()
        actions.addWidget(self.scanButton)
        actions.addWidget(self.checkUpdatesButton)
        actions.addWidget(self.diskLabel, 1)
        actions.addWidget(self.loadButton)
        actions.addWidget(self.loadSettingsButton)
        actions.addWidget(self.verifyButton)
        actions.addWidget(self.updateButton)
        actions.addWidget(self.deleteButton)
        installed = QWidget()
        installed_layout = QVBoxLayout(installed)
        installed_layout.setContentsMargins(0, 0, 0, 0)
        installed_layout.addWidget(self.installedTable, 1)
        installed_layout.addLayout(actions)

        self.busyBar = QProgressBar()
        self.busyBar.setObjectName("libraryBusy")
        # Indeterminate: a load or a hash says nothing about how far along it is.
        self.busyBar.setRange(0, 0)
        self.busyBar.setMaximumWidth(160)
        self.busyBar.hide()
        self.statusLabel = plain_label("libraryStatus")
        self.memoryLabel = plain_label("memoryLabel")
        status_row = QHBoxLayout()
        status_row.addWidget(self.busyBar)
        status_row.addWidget(self.statusLabel, 1)

        splitter = QSplitter(Qt.Orientation.Vertical)
        top = QSplitter(Qt.Orientation.Horizontal)
        top.addWidget(search)
        top.addWidget(repo)
        top.setSizes([380, 620])
        splitter.addWidget(top)
        splitter.addWidget(installed)
        splitter.setSizes([520, 240])
        layout = QVBoxLayout(self)
        layout.addWidget(splitter, 1)
        layout.addLayout(status_row)
        layout.addWidget(self.memoryLabel)

        self._reassess = QTimer(self)
        self._reassess.setSingleShot(True)
        self._reassess.setInterval(REASSESS_DELAY_MS)

    def _override_spin(self, object_name: str) -> QSpinBox:
        spin = QSpinBox()
        spin.setObjectName(object_name)
        spin.setRange(NO_OVERRIDE, MAX_OVERRIDE_MIB)
        spin.setValue(NO_OVERRIDE)
        spin.setSingleStep(1024)
        spin.setSuffix(" MiB")
        return spin

    def _connect(self) -> None:
        self.searchBox.returnPressed.connect(self.search)
        self.searchButton.clicked.connect(self.search)
        self.searchBox.textChanged.connect(self._on_search_text)
        self.hubSettingsButton.clicked.connect(self.open_settings)
        self.resultsTable.itemSelectionChanged.connect(self._open_selected_repo)
        self.recommended.repoChosen.connect(self._open_chosen_repo)
        self.recommended.checkButton.clicked.connect(self.check_recommended)
        # Not connected to start() itself: valueChanged's value would become the timer's interval in ms.
        self.vramSpin.valueChanged.connect(lambda _value: self._reassess.start())
        self.ramSpin.valueChanged.connect(lambda _value: self._reassess.start())
        self._reassess.timeout.connect(self._open_repo)
        self._reassess.timeout.connect(self.recommended.forget_fits)
        self.quantTable.itemSelectionChanged.connect(self._update_buttons)
        self.downloadButton.clicked.connect(self.download_selected)
        self.installedTable.itemSelectionChanged.connect(self._update_buttons)
        self.loadButton.clicked.connect(self.load_selected)
        self.verifyButton.clicked.connect(self.verify_selected)
        self.deleteButton.clicked.connect(self.delete_selected)
        self.loadSettingsButton.clicked.connect(lambda: self.open_load_settings())
        self.scanButton.clicked.connect(lambda: self.open_scan())
        self.checkUpdatesButton.clicked.connect(self.check_updates)
        self.updateButton.clicked.connect(self.update_selected)
        self._scan_worker.missing.connect(self._show_missing)
        self.downloads.pauseRequested.connect(self._library.pause)
        self.downloads.resumeRequested.connect(self._library.resume)
        self.downloads.cancelRequested.connect(self._library.cancel)

        service = self._library
        service.searchFinished.connect(self._show_results)
        service.recommendedListed.connect(self.recommended.show_entries)
        service.recommendedChecked.connect(self._on_recommended_checked)
        service.repoAssessed.connect(self._show_assessment)
        service.failed.connect(self._on_failed)
        service.downloadChanged.connect(self._on_download)
        service.modelsChanged.connect(self._show_models)
        service.diskUsage.connect(self._show_disk)
        service.verified.connect(self._on_verified)
        service.removed.connect(self._on_removed)
        service.switchStarted.connect(self._on_switch_started)
        service.switchFinished.connect(self._on_switch_finished)
        service.loadReport.connect(self._on_load_report)
        service.tokenChanged.connect(self._on_token)
        service.updatesChecked.connect(self._on_updates_checked)
        service.updateFinished.connect(self._on_update_finished)

    def retranslate(self) -> None:
        self.searchBox.setPlaceholderText(self.tr("Search the Hub for GGUF models (e.g. qwen, llama, gemma)"))
        self.searchButton.setText(self.tr("Search"))
        self.hubSettingsButton.setText(self.tr("Token && Hub…"))
        self.resultsTable.setHorizontalHeaderLabels(
            [
                self.tr("Repository"),
                self.tr("Downloads"),
                self.tr("Likes"),
                self.tr("Licence"),
                self.tr("Gated"),
            ]
        )
        self.vramLabel.setText(self.tr("Plan for &VRAM"))
        self.ramLabel.setText(self.tr("&RAM"))
        for spin in (self.vramSpin, self.ramSpin):
            spin.setSpecialValueText(self.tr("this machine"))
            spin.setToolTip(self.tr("What-if: plan for another machine with this much free memory"))
        self.quantTable.setHorizontalHeaderLabels(
            [
                self.tr("Quantization"),
                self.tr("Size"),
                self.tr("Fit"),
                self.tr("Context"),
                self.tr("Memory"),
                self.tr("File"),
            ]
        )
        self.downloadButton.setText(self.tr("Download"))
        self.installedTable.setHorizontalHeaderLabels(
            [self.tr("Installed model"), self.tr("Quantization"), self.tr("Size"), self.tr("Source")]
        )
        self.loadButton.setText(self.tr("Load"))
        self.loadButton.setToolTip(self.tr("Switch the chat to this model; the conversation stays open"))
        self.verifyButton.setText(self.tr("Verify"))
        self.deleteButton.setText(self.tr("Delete"))
        self.loadSettingsButton.setText(self.tr("Load settings…"))
        self.loadSettingsButton.setToolTip(
            self.tr("KV cache, flash attention, GPU layers, threads and context for this model's next load")
        )
        self.scanButton.setText(self.tr("Find models from other apps…"))
        self.scanButton.setToolTip(
            self.tr(
                "Use the models Ollama, LM Studio, the Hugging Face cache, GPT4All or Jan downloaded, "
                "where they are"
            )
        )
        self.checkUpdatesButton.setToolTip(
            self.tr("Ask the Hub whether the models downloaded from it have new files on main")
        )
        self.updateButton.setText(self.tr("Update"))
        self.updateButton.setToolTip(
            self.tr("Download the new file, verify it, then switch the model to it and delete the old one")
        )
        self._update_buttons()

    def changeEvent(self, event: QEvent) -> None:
        if event.type() == QEvent.Type.LanguageChange:
            self.retranslate()
            if self._assessment is not None:
                self._show_assessment(self._assessment)
        super().changeEvent(event)

    # -- search and repos -----------------------------------------------------------------------

    def search(self) -> None:
        query = self.searchBox.text().strip()
        self.searchStack.setCurrentWidget(self.resultsTable)
        self.searchStatus.setText(self.tr("Searching {endpoint}…").format(endpoint=self._endpoint()))
        self._library.search(query)
        if "/" in query and _is_repo_id(query):
            # A pasted repo id opens that repo at once, whatever the search finds (or leaves out).
            self._opened_repo = query
            self._open_repo()

    def _endpoint(self) -> str:
        return self._services.settings.hf_endpoint or self.tr("the Hub")

    def _on_search_text(self, text: str) -> None:
        if not text.strip():
            self.searchStack.setCurrentWidget(self.recommended)
            self.searchStatus.setText("")

    def check_recommended(self) -> None:
        """Ask the Hub for the recommended files' sizes and headers, for the plan the spin boxes say."""
        self.recommended.set_checking(self._endpoint())
        self._library.check_recommended(
            vram_mib=self._override(self.vramSpin), ram_mib=self._override(self.ramSpin)
        )

    def _on_recommended_checked(
        self, fits: Sequence[RecommendedFit], plan: tuple[int | None, int | None], complete: bool
    ) -> None:
        if plan != (self._override(self.vramSpin), self._override(self.ramSpin)):
            # For a plan the spin boxes no longer show; a check for the current one follows or is asked for.
            if complete:
                self.recommended.show_failure(self.tr("the plan changed while checking."))
            return
        self.recommended.show_fits(fits, complete=complete)

    def _open_chosen_repo(self, repo_id: str) -> None:
        self._opened_repo = repo_id
        self._open_repo()

    def _show_results(self, query: str, results: Sequence[RepoSummary]) -> None:
        table = self.resultsTable
        table.blockSignals(True)
        try:
            table.setRowCount(0)
            for summary in results:
                row = table.rowCount()
                table.insertRow(row)
                table.setItem(row, 0, _item(summary.repo_id, summary.repo_id))
                table.setItem(row, 1, _item(_count(summary.downloads), align_right=True))
                table.setItem(row, 2, _item(_count(summary.likes), align_right=True))
                table.setItem(row, 3, _item(summary.license or "?"))
                table.setItem(row, 4, _item(self.tr("gated") if summary.gated else ""))
        finally:
            table.blockSignals(False)
        self.searchStatus.setText(
            self.tr("{n} repositories with GGUF files match “{query}”.").format(n=len(results), query=query)
            if results
            else self.tr("Nothing matches “{query}”.").format(query=query)
        )

    def _open_selected_repo(self) -> None:
        items = self.resultsTable.selectedItems()
        if not items:
            return
        repo_id = _row_data(self.resultsTable, items[0].row())
        if isinstance(repo_id, str):
            self._opened_repo = repo_id
            self._open_repo()

    def _open_repo(self) -> None:
        if self._opened_repo is None:
            return
        self._assessment = None
        self.quantTable.setRowCount(0)
        self.repoMessage.setText("")
        self.repoLabel.setText(self.tr("Reading the GGUF headers of {repo}…").format(repo=self._opened_repo))
        self._update_buttons()
        self._library.open_repo(
            self._opened_repo, vram_mib=self._override(self.vramSpin), ram_mib=self._override(self.ramSpin)
        )

    @staticmethod
    def _override(spin: QSpinBox) -> int | None:
        return None if spin.value() == NO_OVERRIDE else spin.value()

    def _show_assessment(self, assessment: RepoAssessment) -> None:
        self._assessment = assessment
        listing = assessment.listing
        licence = listing.license or self.tr("licence not stated")
        gated = self.tr(", gated") if listing.gated else ""
        self.repoLabel.setText(
            self.tr(
                "{repo} at {commit} ({licence}{gated}). Planning for {hardware}, {context} tokens."
            ).format(
                repo=listing.repo_id,
                commit=listing.commit[:12],
                licence=licence,
                gated=gated,
                hardware=self._describe_hardware(assessment.hardware),
                context=f"{assessment.context:,}",
            )
        )
        table = self.quantTable
        table.blockSignals(True)
        try:
            table.setRowCount(0)
            for index, fit in enumerate(assessment.fits):
                self._add_fit_row(index, fit)
        finally:
            table.blockSignals(False)
        recommended = next((i for i, fit in enumerate(assessment.fits) if fit.recommended), None)
        if recommended is not None:
            table.selectRow(recommended)
        self.repoMessage.setText(self._repo_message(assessment))
        self._update_buttons()

    def _describe_hardware(self, hardware: HardwareReport) -> str:
        gpu = max(hardware.gpus, key=lambda g: g.free_mib, default=None)
        where = (
            self.tr("{gpu} with {free} MiB free").format(gpu=gpu.name, free=f"{gpu.free_mib:,}")
            if gpu is not None
            else self.tr("no GPU ({reason})").format(reason=hardware.gpu_reason)
        )
        return self.tr("{gpu} and {ram} MiB of RAM available").format(
            gpu=where, ram=f"{hardware.ram_available_mib:,}"
        )

    def _repo_message(self, assessment: RepoAssessment) -> str:
        if assessment.access_error is not None:
            return assessment.access_error
        if not assessment.fits:
            return self.tr("This repository has no GGUF models.")
        recommendation = assessment.recommendation
        lines = []
        if recommendation is not None and recommendation.index is not None:
            lines.append(self.tr("Recommended: {reason}").format(reason=recommendation.reason))
            lines += [self.tr("Warning: {text}").format(text=w) for w in recommendation.warnings]
        elif recommendation is not None:
            # Nothing to recommend: the reason says why (too little memory, or only Q2 files fit).
            lines.append(recommendation.reason)
        lines += [
            self.tr("Skipped {name}: {why}").format(name=name, why=why)
            for name, why in assessment.listing.rejected
        ]
        return "\n".join(lines)

    def _add_fit_row(self, index: int, fit: FileFit) -> None:
        table = self.quantTable
        row = table.rowCount()
        table.insertRow(row)
        theme = self._theme()
        estimate = fit.estimate
        size = format_bytes(fit.model.size) if fit.model.size is not None else "?"
        badge, colour = self._badge(fit, theme)
        expected = fit.expected_context
        context = (
            self.tr("{expected} (max {most})").format(
                expected=f"{expected:,}", most=f"{estimate.max_context:,}"
            )
            if expected is not None and estimate is not None
            else "—"
        )
        items = [
            _item(fit.quantization or "?", index),
            _item(size, align_right=True),
            _item(badge),
            _item(context, align_right=True),
            _item(self._memory(estimate) if estimate is not None else "—"),
            _item(self._filenames(fit)),
        ]
        if colour is not None:
            items[2].setForeground(QBrush(QColor(colour)))
        notes = list(estimate.notes) if estimate is not None else []
        items[2].setToolTip(_tooltip(fit.error or "; ".join(notes)))
        items[0].setData(RECOMMENDED_ROLE, fit.recommended)
        if fit.recommended:
            font = QFont(table.font())
            font.setBold(True)
            for item in items:
                item.setBackground(QBrush(QColor(theme.hit_bg)))
                item.setFont(font)
        if fit.model.projector is not None:
            items[5].setToolTip(_tooltip(self._projector_note(fit)))
        for column, item in enumerate(items):
            table.setItem(row, column, item)

    def _filenames(self, fit: FileFit) -> str:
        projector = fit.model.projector
        if projector is None:
            return fit.model.filename
        return self.tr("{model} + vision projector {projector}").format(
            model=fit.model.filename, projector=projector.filename
        )

    def _projector_note(self, fit: FileFit) -> str:
        projector, info = fit.model.projector, fit.projector
        assert projector is not None
        size = format_bytes(projector.size) if projector.size is not None else "?"
        note = self.tr(
            "A vision model: {file} ({size}) is downloaded, verified and counted in the fit with it."
        )
        note = note.format(file=projector.filename, size=size)
        if info is not None and info.image_tokens:
            note += " " + self.tr("Each image takes about {n} tokens of the context.").format(
                n=f"{info.image_tokens:,}"
            )
        return note

    def _badge(self, fit: FileFit, theme: Theme) -> tuple[str, str | None]:
        """The fit badge's text and colour (None: the table's own)."""
        estimate = fit.estimate
        if estimate is None:
            return self.tr("Header unreadable"), theme.error
        text = self._verdict(estimate)
        if fit.recommended:
            text = self.tr("★ {verdict} · recommended").format(verdict=text)
        colour = {Fit.PARTIAL: theme.warning, Fit.EXPERTS_CPU: theme.warning, Fit.TOO_LARGE: theme.error}.get(
            estimate.verdict
        )
        return text, colour

    def _verdict(self, estimate: FitEstimate) -> str:
        if estimate.verdict is Fit.GPU:
            return self.tr("Fits on the GPU")
        if estimate.verdict is Fit.PARTIAL:
            speed = estimate.expected_speed_ratio or 0.0
            return self.tr("Partial: {k}/{n} layers on the GPU, ~{speed} speed").format(
                k=estimate.n_gpu_layers, n=estimate.n_layers, speed=f"{speed:.0%}"
            )
        if estimate.verdict is Fit.EXPERTS_CPU:
            speed = estimate.expected_speed_ratio or 0.0
            return self.tr("Partial: experts in system memory, ~{speed} speed").format(speed=f"{speed:.0%}")
        if estimate.verdict is Fit.CPU:
            return self.tr("CPU only")
        return self.tr("Too large")

    def _memory(self, estimate: FitEstimate) -> str:
        ram = format_bytes(estimate.ram_bytes)
        if estimate.gpu_bytes:
            return self.tr("GPU {gpu} + RAM {ram}").format(gpu=format_bytes(estimate.gpu_bytes), ram=ram)
        return self.tr("RAM {ram}").format(ram=ram)

    def _theme(self) -> Theme:
        # The user's choice now: the window may have switched themes since the panel opened.
        return resolve_theme(self._services.settings.theme)

    def _selected_fit(self) -> FileFit | None:
        items = self.quantTable.selectedItems()
        if not items or self._assessment is None:
            return None
        index = _row_data(self.quantTable, items[0].row())
        return self._assessment.fits[index] if isinstance(index, int) else None

    def download_selected(self) -> None:
        fit = self._selected_fit()
        if fit is None or self._assessment is None:
            return
        self._library.download(self._assessment.listing, fit.model)

    # -- downloads ------------------------------------------------------------------------------

    def _on_download(self, state: DownloadState) -> None:
        self.downloads.show_state(state)

    # -- installed models -----------------------------------------------------------------------

    def _show_models(self, models: Sequence[InstalledModel]) -> None:
        selected = self._selected_model()
        self._models = list(models)
        table = self.installedTable
        table.blockSignals(True)
        try:
            table.setRowCount(0)
            for model in models:
                row = table.rowCount()
                table.insertRow(row)
                builtin = model.source == STARTER_SOURCE
                source = _item(model.repo_id or (self.tr("built in") if builtin else model.source))
                source.setToolTip(_tooltip(model.source))
                table.setItem(row, 0, _item(model.name, model.name))
                table.setItem(row, 1, _item(model.quantization or "?"))
                table.setItem(row, 2, _item(format_bytes(model.total_size_bytes), align_right=True))
                table.setItem(row, 3, source)
                if model.name == selected:
                    table.selectRow(row)
        finally:
            table.blockSignals(False)
        self._relabel()
        # Stat-ing files can hang on a network drive: off the GUI thread, marked when the answer comes.
        self._scan_worker.check_missing(self._models)
        self._update_buttons()

    def _plain_name(self, item: QTableWidgetItem, model: InstalledModel) -> None:
        """The name cell without a badge (missing, update available)."""
        item.setText(self.tr("{name} · vision").format(name=model.name) if model.vision else model.name)
        item.setData(Qt.ItemDataRole.ForegroundRole, None)
        projector = model.projector
        item.setToolTip(
            _tooltip(self.tr("Can see images, with the projector {file}").format(file=projector.filename))
            if projector is not None
            else ""
        )

    def _relabel(self) -> None:
        """Label the name cells, with their badges: after the list, the missing files or the updates changed.
        A missing file is said over an update (there is nothing to update from)."""
        table = self.installedTable
        models = {m.name: m for m in self._models}
        for row in range(table.rowCount()):
            item = table.item(row, 0)
            model = models.get(str(_row_data(table, row)))
            if item is None or model is None:
                continue
            self._plain_name(item, model)
            update = self._updates.get(model.name)
            if update is not None:
                self._badge_update(item, update)
            if model.name in self._missing:
                self._badge_missing(item, model)

    def _show_missing(self, names: set[str]) -> None:
        self._missing = names
        self._relabel()
        self._update_buttons()

    def _badge_missing(self, item: QTableWidgetItem, model: InstalledModel) -> None:
        item.setText(self.tr("{name} · missing").format(name=model.name))
        item.setForeground(QBrush(QColor(self._theme().error)))
        item.setToolTip(
            _tooltip(
                self.tr(
                    "Its file is no longer at {path}: the app that keeps it may have moved or deleted "
                    "it. Put the file back, or remove the model from the library."
                ).format(path=model.path)
            )
        )

    # -- updates from the Hub -------------------------------------------------------------------

    def check_updates(self) -> None:
        if self._library.check_updates():
            self.statusLabel.setText(
                self.tr("Asking {endpoint} for updates…").format(endpoint=self._endpoint())
            )
        self._update_buttons()

    def update_selected(self) -> None:
        name = self._selected_model()
        update = self._updates.get(name) if name is not None else None
        if name is None or update is None or name in self._updating:
            return
        self._updating.add(name)
        self.statusLabel.setText(
            self.tr("Updating {name} from {repo}; it stays usable until the new file is verified.").format(
                name=name, repo=update.repo
            )
        )
        self._library.update(name)
        self._update_buttons()

    def _on_updates_checked(self, report: UpdateReport, fresh: bool) -> None:
        self._updates = {u.name: u for u in report.updates}
        self._relabel()
        errors = "\n".join(
            self.tr("{name}: {reason}").format(name=e.name, reason=e.reason) for e in report.errors
        )
        self.statusLabel.setToolTip(_tooltip(errors))
        if fresh:
            if not report.checked:
                text = self.tr("No models from the Hub are installed; there is nothing to check.")
            elif report.updates:
                text = self.tr("Updates available for {n} of {checked} models from the Hub.").format(
                    n=len(report.updates), checked=report.checked
                )
            else:
                text = self.tr("All {checked} models from the Hub are up to date.").format(
                    checked=report.checked
                )
            if report.errors:
                text += " " + self.tr("{n} could not be checked: {errors}").format(
                    n=len(report.errors), errors="; ".join(errors.splitlines())
                )
            self.statusLabel.setText(text)
        elif report.errors and not self.statusLabel.text():
            self.statusLabel.setText(
                self.tr("The last update check could not check {n} models (details in the tooltip).").format(
                    n=len(report.errors)
                )
            )
        self._update_buttons()

    def _on_update_finished(self, name: str, outcome: str, detail: str) -> None:
        self._updating.discard(name)
        if outcome == UpdateOutcome.UPDATED:
            text = self.tr("Updated {name} to commit {commit}; the old file was deleted.").format(
                name=name, commit=detail
            )
        elif outcome == UpdateOutcome.CURRENT:
            text = self.tr("{name} is up to date.").format(name=name)
        elif outcome == UpdateOutcome.PAUSED:
            text = self.tr("The update of {name} is paused; {name} is unchanged.").format(name=name)
        elif outcome == UpdateOutcome.CANCELLED:
            text = self.tr("The update of {name} was cancelled; {name} is unchanged.").format(name=name)
        else:
            text = self.tr("{name} was not updated: {reason} {name} is unchanged and still usable.").format(
                name=name, reason=detail
            )
        self.statusLabel.setText(text)
        self._update_buttons()

    def _badge_update(self, item: QTableWidgetItem, update: ModelUpdate) -> None:
        item.setText(self.tr("{name} · update available").format(name=update.name))
        item.setForeground(QBrush(QColor(self._theme().accent)))
        tip = self.tr(
            "{repo} has new bytes for {file} on main (commit {commit}). Update downloads and verifies "
            "them, then switches the model to them."
        ).format(repo=update.repo, file=update.file, commit=update.upstream_commit[:12])
        if update.in_place:
            tip += " " + self.tr(
                "This model is used from another app's folder, which Hearth never changes: the update "
                "goes into Hearth's own models folder."
            )
        item.setToolTip(_tooltip(tip))

    # -- models from other apps -----------------------------------------------------------------

    def open_scan(self, result: ScanResult | None = None) -> ModelScanDialog:
        """The window of models other apps keep: `result` shown, or a new scan."""
        if self._scan_dialog is None:
            self._scan_dialog = ModelScanDialog(self._scan_worker, self._services.settings.theme, self)
            self._scan_dialog.libraryChanged.connect(self._library.refresh)
        if result is not None:
            self._scan_dialog.show_result(result)
        else:
            self._scan_dialog.scan()
        self._scan_dialog.show()
        self._scan_dialog.raise_()
        return self._scan_dialog

    def _offer_found(self, result: ScanResult) -> None:
        self._scan_worker.scanned.disconnect(self._offer_found)
        if result.addable and not self._services.settings.models_scan_offered:
            self._services.update_settings(models_scan_offered=True)
            self.open_scan(result)

    @property
    def scan_dialog(self) -> ModelScanDialog | None:
        return self._scan_dialog

    # -- load settings --------------------------------------------------------------------------

    def open_load_settings(self) -> ModelLoadSettingsDialog | None:
        """The load settings window of the selected installed model (one window, reused)."""
        name = self._selected_model()
        model = next((m for m in self._models if m.name == name), None)
        if model is None:
            return None
        dialog = self._load_settings_dialog
        if dialog is None:
            dialog = self._load_settings_dialog = ModelLoadSettingsDialog(self._services, model, self)
            dialog.saved.connect(self._on_load_settings_saved)
        elif not dialog.isVisible() or dialog.model.name != model.name:
            dialog.show_model(model)
        dialog.show()
        dialog.raise_()
        dialog.activateWindow()
        return dialog

    def _on_load_settings_saved(self, model: InstalledModel) -> None:
        # Reopened before the refresh answers, the window shows what was saved.
        self._models = [model if m.name == model.name else m for m in self._models]
        self.statusLabel.setText(
            self.tr("{name} loads with {settings} from its next turn.").format(
                name=model.name, settings=model.load_settings.describe()
            )
        )
        self._library.refresh()

    @property
    def load_settings_dialog(self) -> ModelLoadSettingsDialog | None:
        return self._load_settings_dialog

    def _show_disk(self, usage: DiskUsage) -> None:
        partial = (
            self.tr(", {partial} in unfinished downloads").format(partial=format_bytes(usage.partial_bytes))
            if usage.partial_bytes
            else ""
        )
        self.diskLabel.setText(
            self.tr("Models use {used}{partial}; {free} free on this disk.").format(
                used=format_bytes(usage.models_bytes), partial=partial, free=format_bytes(usage.free_bytes)
            )
        )

    def _selected_model(self) -> str | None:
        items = self.installedTable.selectedItems()
        if not items:
            return None
        name = _row_data(self.installedTable, items[0].row())
        return name if isinstance(name, str) else None

    def load_selected(self) -> None:
        name = self._selected_model()
        if name is None:
            return
        # The window's model picker follows the default model; the open conversation stays as it is.
        self._services.update_settings(default_model=name)
        self._library.switch_model(name)

    def verify_selected(self) -> None:
        name = self._selected_model()
        if name is None:
            return
        self._set_busy(self.tr("Verifying {name} (re-hashing every byte)…").format(name=name))
        self._library.verify(name)

    def delete_selected(self) -> None:
        name = self._selected_model()
        model = next((m for m in self._models if m.name == name), None)
        if model is None:
            return
        if model.path.is_relative_to(self._services.paths.models_dir):
            title, action = self.tr("Delete model"), self.tr("Delete")
            question = self.tr("Delete {name}? This frees {size}.").format(
                name=model.name, size=format_bytes(model.total_size_bytes)
            )
        else:
            # Registered where another app (or the user) keeps it: only forgotten, never deleted.
            title, action = self.tr("Remove model"), self.tr("Remove")
            question = self.tr(
                "Remove {name} from the library? Its file stays where it is, in {folder}."
            ).format(name=model.name, folder=model.path.parent)
        if not self._confirm(self, title, question, action):
            return
        self._set_busy(self.tr("Deleting {name}…").format(name=model.name))
        self._library.remove(model.name)

    def _on_verified(self, name: str, intact: bool) -> None:
        self._set_busy(None)
        self.statusLabel.setText(
            self.tr("{name}: OK, every byte matches the SHA-256 recorded at install.").format(name=name)
            if intact
            else self.tr(
                "{name} is damaged or missing: its files no longer match the SHA-256 recorded at install. "
                "Delete it and download it again."
            ).format(name=name)
        )

    def _on_removed(self, name: str, freed: int) -> None:
        self._set_busy(None)
        self.statusLabel.setText(
            self.tr("Deleted {name}; freed {size}.").format(name=name, size=format_bytes(freed))
            if freed
            else self.tr("Removed {name} from the library; its file was outside the models folder.").format(
                name=name
            )
        )

    def _on_switch_started(self, name: str) -> None:
        self._set_busy(self.tr("Loading {name}…").format(name=name))

    def _on_switch_finished(self, name: str, loaded: bool, detail: str) -> None:
        self._set_busy(None)
        self.statusLabel.setText(
            self.tr("{name} is loaded.").format(name=name)
            if loaded
            else self.tr("{name} could not be loaded: {detail}").format(name=name, detail=detail)
        )

    def _on_load_report(self, name: str, report: str) -> None:
        self.memoryLabel.setText(self.tr("{name}: memory {report}").format(name=name, report=report))

    def _on_failed(self, operation: str, message: str) -> None:
        if operation == "search":
            self.searchStatus.setText(message)
        elif operation == "recommended":
            self.recommended.show_failure(message)
        elif operation == "repo":
            self.repoLabel.setText("")
            self.repoMessage.setText(message)
        elif operation in ("verify", "remove"):
            self._set_busy(None)
            self.statusLabel.setText(message)
        elif operation == "updates":
            self._update_buttons()
            self.statusLabel.setText(self.tr("Could not check for updates: {reason}").format(reason=message))
        elif operation != "token":
            self.statusLabel.setText(message)

    def _on_token(self, _status: SecretStatus) -> None:
        # A new token may open what the old one could not (a gated or private repo).
        if self._opened_repo is not None and self._assessment is not None and self._assessment.access_error:
            self._open_repo()

    def _set_busy(self, message: str | None) -> None:
        """Show `message` with the busy bar, or (None) end the busy state."""
        self._busy = message is not None
        self.busyBar.setVisible(message is not None)
        if message is not None:
            self.statusLabel.setText(message)
        self._update_buttons()

    def _update_buttons(self) -> None:
        self.downloadButton.setEnabled(self._selected_fit() is not None)
        selected = self._selected_model()
        model = next((m for m in self._models if m.name == selected), None)
        idle = not self._busy
        self.loadButton.setEnabled(model is not None and idle and model.name not in self._missing)
        self.verifyButton.setEnabled(model is not None and idle)
        self.deleteButton.setEnabled(model is not None and idle and model.source != STARTER_SOURCE)
        self.loadSettingsButton.setEnabled(model is not None and model.name not in self._missing)
        self.updateButton.setEnabled(
            model is not None and model.name in self._updates and model.name not in self._updating
        )
        checking = self._library.checking_updates
        self.checkUpdatesButton.setEnabled(not checking)
        self.checkUpdatesButton.setText(
            self.tr("Checking for updates…") if checking else self.tr("Check for updates")
        )

    # -- settings -------------------------------------------------------------------------------

    def open_settings(self) -> None:
        if self._settings is None:
            self._settings = SettingsDialog(self._services, self)
        self._settings.show()
        self._settings.raise_()
        self._settings.activateWindow()

    @property
    def settings_dialog(self) -> SettingsDialog | None:
        return self._settings


class LibraryDialog(QDialog):
    """The panel in a window of its own, beside the chat; closing it keeps downloads running."""

    def __init__(
        self, services: AppServices, *, confirm: ConfirmAction = confirm_action, parent: QWidget | None = None
    ) -> None:
        super().__init__(parent)
        self.setObjectName("libraryDialog")
        self.panel = LibraryPanel(services, confirm=confirm)
        layout = QVBoxLayout(self)
        layout.addWidget(self.panel)
        self.resize(1100, 780)
        self.retranslate()

    def retranslate(self) -> None:
        self.setWindowTitle(self.tr("Models"))

    def changeEvent(self, event: QEvent) -> None:
        if event.type() == QEvent.Type.LanguageChange:
            self.retranslate()
        super().changeEvent(event)
