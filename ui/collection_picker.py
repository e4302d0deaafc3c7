"""The collections the open chat answers from: a menu to choose them, beside the attachments, and a chip for
each one chosen (its × stops answering from it). The choice is the chat session's, per conversation.
"""

from __future__ import annotations

from collections.abc import Sequence

import shiboken6
from PySide6.QtCore import QEvent, Qt, Signal
from PySide6.QtWidgets import QFrame, QHBoxLayout, QLabel, QMenu, QToolButton, QWidget

from app.chat.session import ChatSession
from app.documents.collections import CollectionSummary
from app.qt.documents_service import DocumentsService


class CollectionChip(QFrame):
    removed = Signal()

    def __init__(self, name: str, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("collectionChip")
        self.name = name
        self.label = QLabel()
        self.label.setTextFormat(Qt.TextFormat.PlainText)
        self.removeButton = QToolButton()
        self.removeButton.setObjectName("removeCollectionButton")
        self.removeButton.setText("×")
        self.removeButton.setAutoRaise(True)
        self.removeButton.clicked.connect(self.removed)
        layout = QHBoxLayout(self)
        layout.setContentsMargins(8, 2, 2, 2)
        layout.addWidget(self.label)
        layout.addWidget(self.removeButton)
        self.retranslate()

    def retranslate(self) -> None:
        self.label.setText(self.tr("Collection: {name}").format(name=self.name))
        self.removeButton.setToolTip(self.tr("Stop answering from this collection in this chat"))


class CollectionPicker(QWidget):
    # "Manage collections…" in the menu: the window opens the Documents panel.
    manageRequested = Signal()

    def __init__(
        self, session: ChatSession, service: DocumentsService, parent: QWidget | None = None
    ) -> None:
        super().__init__(parent)
        self.setObjectName("collectionPicker")
        self._session = session
        self._service = service
        self.chips: list[CollectionChip] = []
        self.menu = QMenu(self)
        self.menu.setObjectName("collectionsMenu")
        self.button = QToolButton()
        self.button.setObjectName("collectionsButton")
        self.button.setPopupMode(QToolButton.ToolButtonPopupMode.InstantPopup)
        self.button.setMenu(self.menu)
        self.menu.aboutToShow.connect(self.fill_menu)
        self._row = QHBoxLayout(self)
        self._row.setContentsMargins(0, 0, 0, 0)
        self._row.addWidget(self.button)
        session.collections_changed.connect(self._show_chosen)
        service.collectionsChanged.connect(self._listed)
        self.retranslate()
        self._show_chosen(session.collections)

    def retranslate(self) -> None:
        self.button.setText(self.tr("Collections"))
        self.button.setToolTip(self.tr("Choose the document collections this chat answers from"))
        for chip in self.chips:
            chip.retranslate()

    def changeEvent(self, event: QEvent) -> None:
        if event.type() == QEvent.Type.LanguageChange:
            self.retranslate()
        super().changeEvent(event)

    def chosen(self) -> tuple[str, ...]:
        return tuple(chip.name for chip in self.chips)

    def fill_menu(self) -> None:
        """The collections as last listed, each checked when the chat answers from it."""
        self.menu.clear()
        chosen = set(self._session.collections)
        names = self._service.names()
        for name in names:
            action = self.menu.addAction(name)
            action.setCheckable(True)
            action.setChecked(name in chosen)
            action.toggled.connect(lambda on, name=name: self._toggle(name, on))
        if not names:
            empty = self.menu.addAction(self.tr("No collections yet"))
            empty.setEnabled(False)
        self.menu.addSeparator()
        manage = self.menu.addAction(self.tr("Manage collections…"))
        manage.setObjectName("manageCollectionsAction")
        manage.triggered.connect(lambda _checked=False: self.manageRequested.emit())

    def _toggle(self, name: str, on: bool) -> None:
        chosen = [n for n in self._session.collections if n != name]
        self._session.choose_collections([*chosen, name] if on else chosen)

    def _listed(self, summaries: Sequence[CollectionSummary]) -> None:
        # A collection deleted (here or by `hearth docs`) is no longer answered from.
        self._session.keep_collections([summary.name for summary in summaries])

    def _show_chosen(self, names: tuple[str, ...]) -> None:
        if not shiboken6.isValid(self) or names == self.chosen():
            return
        for chip in self.chips:
            chip.deleteLater()
        self.chips = []
        for name in names:
            chip = CollectionChip(name)
            chip.removed.connect(lambda name=name: self._toggle(name, False))
            self.chips.append(chip)
            self._row.addWidget(chip)
