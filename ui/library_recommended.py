"""The library's place to start: the recommended models shipped with Hearth, shown before any search.

Names, descriptions and licences are there at once, with no network; sizes and fits come when the user asks
(the Check button, or opening an entry) and regroup the list. Entries are opened like search results: the
panel listens to `repoChosen`. The fit badges are the panel's own (`badge`), so a file reads the same here as
in the quantization table.
"""

from __future__ import annotations

import html
from collections.abc import Callable, Sequence

from PySide6.QtCore import QEvent, Qt, Signal
from PySide6.QtGui import QBrush, QColor, QFont
from PySide6.QtWidgets import (
    QAbstractItemView,
    QHBoxLayout,
    QHeaderView,
    QTreeWidget,
    QTreeWidgetItem,
    QVBoxLayout,
    QWidget,
)

from app.library.model_ops import FileFit
from app.library.recommended import GROUP_ORDER, FitGroup, RecommendedFit, RecommendedModel
from ui.library_widgets import format_bytes, plain_label, push_button
from ui.theme import Theme

REPO_ROLE = Qt.ItemDataRole.UserRole
COLUMNS = 5


def _tooltip(text: str) -> str:
    # Descriptions and Hub messages are plain text; Qt would take a tooltip that looks like HTML as HTML.
    return f"<p>{html.escape(text)}</p>" if text else ""


class RecommendedList(QWidget):
    # A repo id: the user chose an entry, to be opened as a search result is.
    repoChosen = Signal(str)

    def __init__(
        self,
        badge: Callable[[FileFit], tuple[str, str | None]],
        theme: Callable[[], Theme],
        parent: QWidget | None = None,
    ) -> None:
        super().__init__(parent)
        self.setObjectName("recommendedModels")
        self._badge = badge
        self._theme = theme
        self._entries: tuple[RecommendedModel, ...] = ()
        self._fits: dict[str, RecommendedFit] = {}
        self.checking = False
        self.title = plain_label("recommendedTitle")
        self.checkButton = push_button("checkFitButton")
        self.tree = QTreeWidget()
        self.tree.setObjectName("recommendedTree")
        self.tree.setColumnCount(COLUMNS)
        self.tree.setRootIsDecorated(False)
        self.tree.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
        self.tree.setSelectionMode(QAbstractItemView.SelectionMode.SingleSelection)
        self.tree.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
        self.tree.header().setSectionResizeMode(QHeaderView.ResizeMode.ResizeToContents)
        self.tree.header().setStretchLastSection(True)
        self.status = plain_label("recommendedStatus")
        top = QHBoxLayout()
        top.addWidget(self.title, 1)
        top.addWidget(self.checkButton)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addLayout(top)
        layout.addWidget(self.tree, 1)
        layout.addWidget(self.status)
        self.tree.itemSelectionChanged.connect(self._chosen)
        self.retranslate()

    def retranslate(self) -> None:
        self.title.setText(self.tr("Recommended models to start with"))
        self.checkButton.setText(self.tr("Checking…") if self.checking else self.tr("Check sizes and fit"))
        self.checkButton.setToolTip(
            self.tr("Ask the Hub for each suggested file's size and read its header to see how it fits")
        )
        self.tree.setHeaderLabels(
            [self.tr("Model"), self.tr("Good for"), self.tr("Fit"), self.tr("File"), self.tr("Licence")]
        )
        self._rebuild()

    def changeEvent(self, event: QEvent) -> None:
        if event.type() == QEvent.Type.LanguageChange:
            self.retranslate()
        super().changeEvent(event)

    # -- what the panel tells it ------------------------------------------------------------------

    def show_entries(self, entries: Sequence[RecommendedModel]) -> None:
        self._entries = tuple(entries)
        if not self._entries:
            self.status.setText(self.tr("The list of recommended models could not be read; search the Hub."))
        self._rebuild()

    def set_checking(self, endpoint: str) -> None:
        self.checking = True
        self.checkButton.setEnabled(False)
        self.checkButton.setText(self.tr("Checking…"))
        self.status.setToolTip("")
        self.status.setText(
            self.tr("Reading the sizes and GGUF headers of the suggested files from {endpoint}…").format(
                endpoint=endpoint
            )
        )

    def show_fits(self, fits: Sequence[RecommendedFit], *, complete: bool) -> None:
        """Merge what was found; `complete`: the answer to the Check button, which the status sums up."""
        for found in fits:
            known = self._fits.get(found.entry.repo_id)
            # A failure to re-check does not hide a fit found earlier for the same plan.
            if found.fit is not None or known is None or known.fit is None:
                self._fits[found.entry.repo_id] = found
        if complete:
            self._finish_check(fits)
        self._rebuild()

    def show_failure(self, message: str) -> None:
        """The check could not start or failed as a whole; the list stays as it was."""
        self._end_checking()
        self.status.setText(
            self.tr(
                "Could not check sizes and fit: {reason} The list is still here; try again later."
            ).format(reason=message)
        )

    def forget_fits(self) -> None:
        """The plan changed (the what-if memory): the fits were for another machine."""
        if not self._fits:
            return
        self._fits.clear()
        self.status.setToolTip("")
        self.status.setText(self.tr("The plan changed; check sizes and fit again to regroup the list."))
        self._rebuild()

    # -- inside -----------------------------------------------------------------------------------

    def _end_checking(self) -> None:
        self.checking = False
        self.checkButton.setEnabled(True)
        self.checkButton.setText(self.tr("Check sizes and fit"))

    def _finish_check(self, fits: Sequence[RecommendedFit]) -> None:
        self._end_checking()
        failed = [f for f in fits if f.fit is None or f.fit.estimate is None]
        reasons = list(dict.fromkeys(f.error or "" for f in failed))
        self.status.setToolTip(
            _tooltip("\n".join(f"{f.entry.repo_id}: {f.error}" for f in failed if f.error))
        )
        if not failed:
            self.status.setText(self.tr("Checked all {n} suggested files.").format(n=len(fits)))
        elif len(failed) == len(fits):
            self.status.setText(
                self.tr(
                    "Could not check sizes and fit: {reason} The list is still here; try again later."
                ).format(reason=reasons[0])
            )
        else:
            self.status.setText(
                self.tr(
                    "Checked {ok} of {n} suggested files; {failed} could not be checked: {reason}"
                ).format(ok=len(fits) - len(failed), n=len(fits), failed=len(failed), reason=reasons[0])
            )

    def _group_title(self, group: FitGroup, count: int) -> str:
        if group is FitGroup.GPU:
            title = self.tr("Fits on the GPU")
        elif group is FitGroup.PARTIAL:
            title = self.tr("Partly on the GPU")
        elif group is FitGroup.CPU:
            title = self.tr("Runs in system memory (CPU only)")
        elif group is FitGroup.TOO_LARGE:
            title = self.tr("Too large for this machine")
        elif self._fits:
            title = self.tr("Fit not known")
        else:
            title = self.tr("Sizes and fit not checked yet")
        return self.tr("{group} ({n})").format(group=title, n=count)

    def _rebuild(self) -> None:
        selected = self._selected()
        tree = self.tree
        tree.blockSignals(True)
        try:
            tree.clear()
            groups: dict[FitGroup, list[RecommendedModel]] = {}
            for entry in self._entries:
                found = self._fits.get(entry.repo_id)
                groups.setdefault(found.group if found is not None else FitGroup.UNKNOWN, []).append(entry)
            bold = QFont(tree.font())
            bold.setBold(True)
            for group in GROUP_ORDER:
                members = groups.get(group, [])
                if not members:
                    continue
                heading = QTreeWidgetItem([self._group_title(group, len(members))])
                heading.setFlags(Qt.ItemFlag.ItemIsEnabled)
                heading.setFont(0, bold)
                tree.addTopLevelItem(heading)
                heading.setFirstColumnSpanned(True)
                for entry in members:
                    row = self._row(entry)
                    heading.addChild(row)
                    if entry.repo_id == selected:
                        row.setSelected(True)
            tree.expandAll()
        finally:
            tree.blockSignals(False)

    def _row(self, entry: RecommendedModel) -> QTreeWidgetItem:
        found = self._fits.get(entry.repo_id)
        fit = found.fit if found is not None else None
        if fit is not None and fit.estimate is not None:
            badge, colour = self._badge(fit)
        elif found is not None:
            badge, colour = self.tr("Could not check"), self._theme().error
        else:
            badge, colour = self.tr("Not checked"), None
        file = entry.quantization
        if fit is not None and fit.model.size is not None:
            file = self.tr("{quant} · {size}").format(
                quant=fit.quantization or entry.quantization, size=format_bytes(fit.model.size)
            )
        row = QTreeWidgetItem([entry.repo_id, entry.description, badge, file, entry.license])
        row.setData(0, REPO_ROLE, entry.repo_id)
        row.setToolTip(0, _tooltip(entry.description))
        row.setToolTip(1, _tooltip(entry.description))
        if colour is not None:
            row.setForeground(2, QBrush(QColor(colour)))
        if found is not None and found.error:
            row.setToolTip(2, _tooltip(found.error))
        if fit is not None:
            row.setToolTip(3, _tooltip(fit.model.filename))
        return row

    def _selected(self) -> str | None:
        items = self.tree.selectedItems()
        repo = items[0].data(0, REPO_ROLE) if items and items[0].parent() is not None else None
        return repo if isinstance(repo, str) else None

    def _chosen(self) -> None:
        repo = self._selected()
        if repo is not None:
            self.repoChosen.emit(repo)
