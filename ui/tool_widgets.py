"""Tools in the chat: a menu of the MCP servers whose tools the model may call in the open chat, and
the card that asks about each call the model makes (Allow once, Allow in this chat, Deny)."""

from __future__ import annotations

import shiboken6
from PySide6.QtCore import QEvent, Qt, Signal
from PySide6.QtGui import QAction, QFontDatabase
from PySide6.QtWidgets import (
    QFrame,
    QHBoxLayout,
    QLabel,
    QMenu,
    QPlainTextEdit,
    QPushButton,
    QToolButton,
    QVBoxLayout,
    QWidget,
)

from app.chat.session import ChatSession
from app.tools.chat import Approval, PendingApproval
from app.tools.config import ToolServerRegistry


class ToolsPicker(QToolButton):
    """The servers the model may call tools of in the open chat; checked in the menu, held by the chat session
    and kept with the conversation."""

    # "Manage tool servers…" in the menu: the window opens View → Tools….
    manageRequested = Signal()

    def __init__(
        self, session: ChatSession, registry: ToolServerRegistry, parent: QWidget | None = None
    ) -> None:
        super().__init__(parent)
        self.setObjectName("toolsButton")
        self._session = session
        self._registry = registry
        self.menu_ = QMenu(self)
        self.menu_.setObjectName("toolsMenu")
        self.setMenu(self.menu_)
        self.setPopupMode(QToolButton.ToolButtonPopupMode.InstantPopup)
        self.menu_.aboutToShow.connect(self.fill_menu)
        session.tools_changed.connect(lambda _chosen: self.retranslate())
        self.retranslate()

    def fill_menu(self) -> None:
        """From mcp.json as it is now: a small file, read when the menu opens."""
        self.menu_.clear()
        servers = {s.name: s for s in self._registry.servers()}
        usable = [name for name, server in servers.items() if server.enabled]
        chosen = self._session.tools
        # A chat keeps what it chose: a server turned off or removed since stays ticked, to be unticked.
        unusable = [name for name in chosen if name not in usable]
        if not usable and not unusable:
            empty = QAction(self.tr("No tool servers yet"), self.menu_)
            empty.setEnabled(False)
            self.menu_.addAction(empty)
        for name in [*usable, *unusable]:
            label = name
            if name in unusable:
                label = (
                    self.tr("{name} (turned off)") if name in servers else self.tr("{name} (removed)")
                ).format(name=name)
            action = QAction(label, self.menu_)
            action.setCheckable(True)
            action.setChecked(name in chosen)
            action.toggled.connect(lambda on, name=name: self._toggle(name, on))
            self.menu_.addAction(action)
        self.menu_.addSeparator()
        manage = QAction(self.tr("Manage tool servers…"), self.menu_)
        manage.setObjectName("manageToolServersAction")
        manage.triggered.connect(self.manageRequested)
        self.menu_.addAction(manage)

    def _toggle(self, name: str, on: bool) -> None:
        names = [n for n in self._session.tools if n != name]
        self._session.choose_tools((*names, name) if on else tuple(names))

    def retranslate(self) -> None:
        count = len(self._session.tools)
        self.setText(self.tr("Tools ({count})").format(count=count) if count else self.tr("Tools"))
        self.setToolTip(
            self.tr("Choose the tool servers (MCP) whose tools the model may call; each call is asked about")
        )

    def changeEvent(self, event: QEvent) -> None:
        if event.type() == QEvent.Type.LanguageChange:
            self.retranslate()
        super().changeEvent(event)


class ToolApprovalCard(QFrame):
    """One call at a time: what would run, where, with which arguments, and the user's three answers."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("toolApprovalCard")
        self.setFrameShape(QFrame.Shape.StyledPanel)
        self.pending: PendingApproval | None = None
        self.question = QLabel()
        self.question.setObjectName("toolQuestion")
        self.question.setTextFormat(Qt.TextFormat.PlainText)
        self.question.setWordWrap(True)
        self.arguments = QPlainTextEdit()
        self.arguments.setObjectName("toolArguments")
        self.arguments.setReadOnly(True)
        self.arguments.setFont(QFontDatabase.systemFont(QFontDatabase.SystemFont.FixedFont))
        self.arguments.setMaximumHeight(120)
        self.allowOnceButton = QPushButton()
        self.allowOnceButton.setObjectName("allowOnceButton")
        self.allowInChatButton = QPushButton()
        self.allowInChatButton.setObjectName("allowInChatButton")
        self.denyButton = QPushButton()
        self.denyButton.setObjectName("denyButton")
        for button, approval in (
            (self.allowOnceButton, Approval.ALLOW_ONCE),
            (self.allowInChatButton, Approval.ALLOW_IN_CHAT),
            (self.denyButton, Approval.DENY),
        ):
            button.clicked.connect(lambda _checked=False, a=approval: self._answered(a))
        buttons = QHBoxLayout()
        buttons.addStretch(1)
        buttons.addWidget(self.denyButton)
        buttons.addWidget(self.allowInChatButton)
        buttons.addWidget(self.allowOnceButton)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(10, 6, 10, 6)
        layout.addWidget(self.question)
        layout.addWidget(self.arguments)
        layout.addLayout(buttons)
        self.retranslate()
        self.hide()

    def ask(self, pending: PendingApproval) -> None:
        self.pending = pending
        self._show_request()
        self.show()
        self.allowOnceButton.setFocus()

    def ended(self, pending: PendingApproval) -> None:
        """The question is over: answered here, or given up (Stop, or the window closing)."""
        if self.pending is pending and shiboken6.isValid(self):
            self.pending = None
            self.hide()

    def _answered(self, approval: Approval) -> None:
        pending = self.pending
        if pending is not None:
            pending.answer(approval)
            self.ended(pending)

    def _show_request(self) -> None:
        if self.pending is None:
            return
        request = self.pending.request
        self.question.setText(
            self.tr("The model wants to run {tool} on {server}. Allow it?").format(
                tool=request.tool, server=request.server
            )
        )
        self.arguments.setPlainText(request.arguments_shown())

    def retranslate(self) -> None:
        self.allowOnceButton.setText(self.tr("Allow once"))
        self.allowInChatButton.setText(self.tr("Allow in this chat"))
        self.allowInChatButton.setToolTip(
            self.tr("Run this tool without asking for the rest of this conversation")
        )
        self.denyButton.setText(self.tr("Deny"))
        self._show_request()

    def changeEvent(self, event: QEvent) -> None:
        if event.type() == QEvent.Type.LanguageChange:
            self.retranslate()
        super().changeEvent(event)
