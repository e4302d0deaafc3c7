"""The window's left column: New chat, search, and the conversation list with rename, pin and delete."""

from __future__ import annotations

from collections.abc import Sequence

from PySide6.QtCore import QPoint, QRectF, Qt, Signal
from PySide6.QtGui import QColor, QIcon, QPainter, QPen, QPixmap
from PySide6.QtWidgets import (
    QHBoxLayout,
    QListWidget,
    QListWidgetItem,
    QMenu,
    QPushButton,
    QVBoxLayout,
    QWidget,
)

from app.conversations.store import Conversation, SearchHit
from ui.search_panel import SearchPanel
from ui.theme import LIGHT, Theme
from ui.window_context import WindowContext

ID_ROLE = Qt.ItemDataRole.UserRole
PINNED_ROLE = Qt.ItemDataRole.UserRole + 1


def _pin_icon(colour: str) -> QIcon:
    pixmap = QPixmap(16, 16)
    pixmap.fill(Qt.GlobalColor.transparent)
    painter = QPainter(pixmap)
    painter.setRenderHint(QPainter.RenderHint.Antialiasing)
    painter.setPen(QPen(QColor(colour), 1.6))
    painter.setBrush(QColor(colour))
    painter.drawEllipse(QRectF(4.5, 1.5, 7, 7))
    painter.drawLine(8, 8, 8, 14)
    painter.end()
    return QIcon(pixmap)


class Sidebar(QWidget):
    """Conversations as the session lists them. The user picking one, or a search hit, is a signal;
    renaming, pinning and deleting are done here, through the store off the GUI thread."""

    newChatRequested = Signal()
    conversationPicked = Signal(int)
    # (conversation id, message id or None, whether the hit is in the reply's thinking)
    hitOpened = Signal(int, object, bool)
    exportRequested = Signal(int, str)
    # A conversation went to the trash: (id, title), for the undo bar.
    trashed = Signal(int, str)
    searchClosed = Signal()

    def __init__(self, context: WindowContext, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("sidebar")
        self._context = context
        self._theme: Theme = LIGHT
        self.newChatButton = QPushButton()
        self.newChatButton.setObjectName("newChatButton")
        self.searchButton = QPushButton()
        self.searchButton.setObjectName("searchButton")
        self.conversationList = QListWidget()
        self.conversationList.setObjectName("conversationList")
        self.conversationList.setUniformItemSizes(True)
        # Long titles are elided rather than scrolled sideways.
        self.conversationList.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.conversationList.setTextElideMode(Qt.TextElideMode.ElideRight)
        self.conversationList.setContextMenuPolicy(Qt.ContextMenuPolicy.CustomContextMenu)
        self.renameButton = QPushButton()
        self.renameButton.setObjectName("renameButton")
        self.pinButton = QPushButton()
        self.pinButton.setObjectName("pinButton")
        self.deleteButton = QPushButton()
        self.deleteButton.setObjectName("deleteButton")
        self.searchPanel = SearchPanel()
        self.searchPanel.hide()

        layout = QVBoxLayout(self)
        layout.setContentsMargins(10, 10, 10, 10)
        top_buttons = QHBoxLayout()
        top_buttons.addWidget(self.newChatButton, 1)
        top_buttons.addWidget(self.searchButton)
        layout.addLayout(top_buttons)
        layout.addWidget(self.searchPanel, 1)
        layout.addWidget(self.conversationList, 1)
        manage = QHBoxLayout()
        manage.addWidget(self.renameButton)
        manage.addWidget(self.pinButton)
        manage.addWidget(self.deleteButton)
        layout.addLayout(manage)

        self.newChatButton.clicked.connect(lambda: self.newChatRequested.emit())
        self.searchButton.clicked.connect(self.open_search)
        self.renameButton.clicked.connect(self._rename_selected)
        self.pinButton.clicked.connect(self._toggle_pin_selected)
        self.deleteButton.clicked.connect(self._delete_selected)
        self.conversationList.currentItemChanged.connect(self._on_picked)
        self.conversationList.customContextMenuRequested.connect(self._menu)
        self.searchPanel.searchRequested.connect(self._search)
        self.searchPanel.hitActivated.connect(self._open_hit)
        self.searchPanel.closed.connect(self._search_closed)

    def retranslate(self) -> None:
        self.newChatButton.setText(self.tr("New chat"))
        self.searchButton.setText(self.tr("Search"))
        self.searchButton.setToolTip(self.tr("Search all chats (Ctrl+F)"))
        self.renameButton.setText(self.tr("Rename"))
        self.deleteButton.setText(self.tr("Delete"))
        self._update_pin_button()
        self.searchPanel.retranslate()

    def set_theme(self, theme: Theme) -> None:
        self._theme = theme
        self.searchPanel.set_theme(theme)

    def update_controls(self) -> None:
        selected = self.conversationList.currentItem() is not None
        writable = not self._context.read_only
        for control in (self.renameButton, self.pinButton, self.deleteButton):
            control.setEnabled(selected and writable)
        self.newChatButton.setEnabled(writable)
        self._update_pin_button()

    # -- the list ---------------------------------------------------------------------------------

    def show_conversations(self, conversations: Sequence[Conversation]) -> None:
        current = self._context.session.current_id
        pin = _pin_icon(self._theme.accent)
        # Rebuilding the list must not look like the user picking a conversation.
        self.conversationList.blockSignals(True)
        try:
            self.conversationList.clear()
            for conversation in conversations:
                item = QListWidgetItem(conversation.title)
                item.setData(ID_ROLE, conversation.id)
                item.setData(PINNED_ROLE, conversation.pinned)
                if conversation.pinned:
                    item.setIcon(pin)
                self.conversationList.addItem(item)
                if conversation.id == current:
                    self.conversationList.setCurrentItem(item)
        finally:
            self.conversationList.blockSignals(False)

    def select(self, conversation_id: int | None) -> None:
        """Show `conversation_id` as the current one (None: none is), without it counting as a pick."""
        self.conversationList.blockSignals(True)
        if conversation_id is None:
            self.conversationList.setCurrentRow(-1)
        for row in range(self.conversationList.count()):
            item = self.conversationList.item(row)
            if int(item.data(ID_ROLE)) == conversation_id:
                self.conversationList.setCurrentItem(item)
        self.conversationList.blockSignals(False)

    def _on_picked(self, item: QListWidgetItem | None, _previous: QListWidgetItem | None) -> None:
        if item is not None:
            self.conversationPicked.emit(int(item.data(ID_ROLE)))

    def _selected(self) -> tuple[int, str] | None:
        item = self.conversationList.currentItem()
        if item is None:
            return None
        return int(item.data(ID_ROLE)), item.text()

    def _menu(self, pos: QPoint) -> None:
        item = self.conversationList.itemAt(pos)
        if item is None:
            return
        conversation_id, title = int(item.data(ID_ROLE)), item.text()
        pinned = bool(item.data(PINNED_ROLE))
        menu = QMenu(self)
        menu.addAction(self.tr("Rename…"), lambda: self.rename_conversation(conversation_id, title))
        menu.addAction(
            self.tr("Unpin") if pinned else self.tr("Pin to the top"),
            lambda: self.set_pinned(conversation_id, not pinned),
        )
        menu.addAction(
            self.tr("Export as Markdown…"), lambda: self.exportRequested.emit(conversation_id, "md")
        )
        menu.addAction(self.tr("Export as JSON…"), lambda: self.exportRequested.emit(conversation_id, "json"))
        menu.addSeparator()
        menu.addAction(self.tr("Delete"), lambda: self.delete_conversation(conversation_id, title))
        menu.exec(self.conversationList.viewport().mapToGlobal(pos))

    # -- rename, pin, delete ----------------------------------------------------------------------

    def _rename_selected(self) -> None:
        selected = self._selected()
        if selected is not None:
            self.rename_conversation(*selected)

    def rename_conversation(self, conversation_id: int, title: str) -> None:
        new_title = self._context.dialogs.ask(self, self.tr("Rename chat"), self.tr("New name:"), title)
        if new_title is None or not new_title.strip():
            return
        store, session = self._context.services.store, self._context.session
        self._context.run(
            lambda: store.rename_conversation(conversation_id, new_title.strip()),
            lambda _renamed: session.refresh_conversations(),
        )

    def _toggle_pin_selected(self) -> None:
        item = self.conversationList.currentItem()
        if item is not None:
            self.set_pinned(int(item.data(ID_ROLE)), not bool(item.data(PINNED_ROLE)))

    def set_pinned(self, conversation_id: int, pinned: bool) -> None:
        store, session = self._context.services.store, self._context.session
        self._context.run(
            lambda: store.set_pinned(conversation_id, pinned), lambda _c: session.refresh_conversations()
        )

    def _update_pin_button(self) -> None:
        item = self.conversationList.currentItem()
        pinned = item is not None and bool(item.data(PINNED_ROLE))
        self.pinButton.setText(self.tr("Unpin") if pinned else self.tr("Pin"))

    def _delete_selected(self) -> None:
        selected = self._selected()
        if selected is not None:
            self.delete_conversation(*selected)

    def delete_conversation(self, conversation_id: int, title: str) -> None:
        """Moves it to the trash; the undo bar offers it back until it expires."""
        session = self._context.session
        if self._context.services.chat.busy and session.streaming_in(conversation_id):
            self._context.show_error(self.tr("Stop the reply before deleting this chat."))
            return
        if conversation_id == session.current_id:
            self.newChatRequested.emit()
        store = self._context.services.store

        def trashed(_none: None) -> None:
            self.trashed.emit(conversation_id, title)
            session.refresh_conversations()

        self._context.run(lambda: store.trash_conversation(conversation_id), trashed)

    def undo_delete(self, conversation_id: int) -> None:
        store, session = self._context.services.store, self._context.session

        def restored(conversation: Conversation) -> None:
            session.refresh_conversations()
            self.conversationPicked.emit(conversation.id)

        self._context.run(lambda: store.restore_conversation(conversation_id), restored)

    def purge_deleted(self, _conversation_id: int | None = None) -> None:
        self._context.run(self._context.services.store.purge_trashed, lambda _count: None)

    # -- search -----------------------------------------------------------------------------------

    def open_search(self) -> None:
        self.conversationList.hide()
        self.searchPanel.open()

    def close_search(self) -> None:
        self.searchPanel.close_panel()

    def _search_closed(self) -> None:
        self.conversationList.show()
        self.searchClosed.emit()

    def _search(self, query: str) -> None:
        store = self._context.services.store
        self._context.run(lambda: store.search(query), lambda hits: self._show_hits(query, hits))

    def _show_hits(self, query: str, hits: list[SearchHit]) -> None:
        self.searchPanel.show_results(query, hits)

    def _open_hit(self, conversation_id: int, message_id: int | None) -> None:
        self.select(conversation_id)
        in_thinking = any(
            hit.in_reasoning
            for hit in self.searchPanel.hits
            if (hit.conversation_id, hit.message_id) == (conversation_id, message_id)
        )
        self.hitOpened.emit(conversation_id, message_id, in_thinking)
