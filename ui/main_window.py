"""Hearth's main window: conversations on the left, the transcript and composer in the middle, the chat's
settings on the right.

Widgets only. Every read or write of conversations, presets and models goes through
`services.background` or the chat service, so the event loop never waits on the database or the model.
"""

from __future__ import annotations

import html
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, TypeVar, cast

import shiboken6
from PySide6.QtCore import QEvent, QPoint, QRectF, Qt, QTimer
from PySide6.QtGui import (
    QAction,
    QActionGroup,
    QCloseEvent,
    QColor,
    QDesktopServices,
    QGuiApplication,
    QIcon,
    QKeySequence,
    QPainter,
    QPen,
    QPixmap,
    QShortcut,
    QStandardItemModel,
)
from PySide6.QtWidgets import (
    QComboBox,
    QFrame,
    QHBoxLayout,
    QLabel,
    QListWidget,
    QListWidgetItem,
    QMainWindow,
    QMenu,
    QPushButton,
    QSplitter,
    QVBoxLayout,
    QWidget,
)

from app.chat.engine import ContextUsage, ModelStatus
from app.chat.presets import Preset, delete_preset, list_presets, save_preset
from app.conversations.store import (
    Conversation,
    ExportReport,
    ImportReport,
    Message,
    SearchHit,
    export_filename,
)
from app.errors import HearthError
from app.library.installed import InstalledModel
from app.qt.services import AppServices
from app.remote.registry import ServerListing, split_model_name
from app.storage.backup import BackupInfo, RestoreResult, list_backups, restore_backup
from inference.hardware import HardwareReport
from inference.protocol import GenerationStats, SamplingParams
from ui.composer import Composer
from ui.context_meter import ContextMeter
from ui.dialogs import (
    AskChoice,
    AskDirectory,
    AskOpenPath,
    AskSavePath,
    AskText,
    ConfirmAction,
    ask_choice,
    ask_directory,
    ask_open_path,
    ask_save_path,
    ask_text,
    confirm_action,
)
from ui.highlight import warm_up as warm_up_highlighting
from ui.i18n import LANGUAGES, Translations
from ui.library_panel import LibraryDialog
from ui.local_server_panel import LocalServerDialog, LocalServerIndicator
from ui.provenance import ProvenanceDialog
from ui.safe_browser import ConfirmOpen, OpenUrl, confirm_open_url
from ui.search_panel import SearchPanel
from ui.server_dialog import ServerAdded, ServerDialog
from ui.servers_panel import ModelPicker, ServersDialog, plain_tooltip, unavailable_text
from ui.settings_panel import PresetChoice, SettingsPanel
from ui.status_line import describe_gpu
from ui.theme import THEME_CHOICES, Theme, palette, resolve_theme, stylesheet
from ui.transcript import ReplyStats, Transcript, TranscriptEntry
from ui.undo_bar import UndoBar

log = logging.getLogger("hearth.ui")

T = TypeVar("T")

ERROR_MESSAGE_MS = 15_000
INFO_MESSAGE_MS = 5_000
# The context meter is re-measured this long after the user stops typing.
MEASURE_DELAY_MS = 400
ID_ROLE = Qt.ItemDataRole.UserRole
PINNED_ROLE = Qt.ItemDataRole.UserRole + 1
CHAT_FILES = "JSON (*.json);;All files (*)"
SETTINGS_PANEL_WIDTH = 320
# The model picker's last entries open the Add server and Manage servers dialogs; no model name can contain
# a NUL.
ADD_SERVER = "\0add-server"
MANAGE_SERVERS = "\0manage-servers"


def entry_for(message: Message) -> TranscriptEntry:
    stats = None
    if message.role == "assistant" and (
        message.ttft_ms is not None or message.tokens_per_second is not None or message.completion_tokens
    ):
        stats = ReplyStats(
            message.ttft_ms / 1000.0 if message.ttft_ms is not None else None,
            message.tokens_per_second,
            message.completion_tokens,
            message.prompt_tokens,
        )
    return TranscriptEntry(
        message.id,
        message.role,
        message.content,
        message.status,
        message.error,
        stats,
        message.sibling_index,
        message.sibling_count,
        message.context_note,
        reasoning=message.reasoning,
        reasoning_seconds=message.reasoning_seconds,
    )


def _plain_label(object_name: str) -> QLabel:
    label = QLabel()
    label.setObjectName(object_name)
    # Model names and backend notes come from GGUF metadata: never let a label parse them as HTML.
    label.setTextFormat(Qt.TextFormat.PlainText)
    return label


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


@dataclass
class _Request:
    """What the user asked the chat service for, until it answers with replyStarted or replyFailed."""

    kind: str  # "send" | "regenerate" | "edit"
    conversation_id: int | None
    text: str = ""
    target: int | None = None


@dataclass
class _Live:
    """The reply being written: enough to rebuild the view after switching away and back."""

    conversation_id: int
    user_id: int
    user_text: str | None
    assistant_id: int
    parts: list[str] = field(default_factory=list)
    note: str | None = None
    reasoning: list[str] = field(default_factory=list)
    # When the model started thinking and when its answer began (monotonic), for the Thinking label.
    thinking_since: float | None = None
    answer_since: float | None = None


class MainWindow(QMainWindow):
    def __init__(
        self,
        services: AppServices,
        *,
        confirm: ConfirmAction = confirm_action,
        ask: AskText = ask_text,
        ask_save: AskSavePath = ask_save_path,
        ask_open: AskOpenPath = ask_open_path,
        ask_folder: AskDirectory = ask_directory,
        ask_choice: AskChoice = ask_choice,
        confirm_open: ConfirmOpen = confirm_open_url,
        open_url: OpenUrl = QDesktopServices.openUrl,
        translations: Translations | None = None,
        preload_model: bool = True,
    ) -> None:
        super().__init__()
        self._services = services
        self._chat = services.chat
        self._confirm = confirm
        self._ask = ask
        self._ask_save = ask_save
        self._ask_open = ask_open
        self._ask_folder = ask_folder
        self._ask_choice = ask_choice
        # A damaged database is open read-only: nothing is written, so no model is needed either.
        self._read_only = services.core.damaged is not None
        self._preload_model = preload_model and not self._read_only
        self._translations = translations or Translations()
        self._owns_translations = translations is None

        self._current_id: int | None = None
        # Bumped on every conversation switch so a slow load for a previous one is dropped.
        self._load_generation = 0
        self._messages: dict[int, Message] = {}
        self._conversations: dict[int, Conversation] = {}
        self._pending: _Request | None = None
        self._live: _Live | None = None
        # A search hit in a reply's thinking: that reply opens with its Thinking section expanded.
        self._thinking_hit: int | None = None
        self._editing: int | None = None
        # A chat created for settings edited before its first message; sends wait for it.
        self._creating = False
        self._after_creation: list[Callable[[], None]] = []
        self._presets: list[Preset] = []
        # Counts settings edits, so a conversation read from before an edit does not overwrite it.
        self._settings_edits = 0
        self._dialogs: list[ProvenanceDialog] = []
        self._library_dialog: LibraryDialog | None = None
        self._local_server_dialog: LocalServerDialog | None = None
        self._theme: Theme = resolve_theme(services.settings.theme)
        self._models_loaded = False
        self._conversations_loaded = False
        self._status_known = False
        self._local_models: list[InstalledModel] = []
        self._server_listings: list[ServerListing] = []
        self._last_model: str | None = None  # what the picker showed before "Add server…" was chosen
        self.serverDialog: ServerDialog | None = None
        self.serversDialog: ServersDialog | None = None
        # Once closed, no new background work: the services may already be shutting down.
        self._closed = False

        self.setWindowTitle("Hearth")
        self.resize(1180, 760)
        self._build(confirm_open, open_url)
        self._build_menus()
        self._connect()
        self.retranslate()
        self._apply_theme()

        # Anything still in the trash was deleted in a session that ended before its undo bar expired.
        if not self._read_only:
            self._run(services.store.purge_trashed, lambda _count: None)
        self.refresh_conversations()
        self._run(services.library.list_models, self._show_models)
        self._services.servers_service.refresh()
        self._run(self._chat.current_status, self._on_model_status)
        self._refresh_presets()
        self._run(warm_up_highlighting, lambda _none: None)
        if services.gpu_monitor.latest is not None:
            self._on_gpu_status(services.gpu_monitor.latest)
        self.composer.setFocus()

    # -- construction ---------------------------------------------------------------------------

    def _build(self, confirm_open: ConfirmOpen, open_url: OpenUrl) -> None:
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

        sidebar = QWidget()
        sidebar.setObjectName("sidebar")
        sidebar_layout = QVBoxLayout(sidebar)
        sidebar_layout.setContentsMargins(10, 10, 10, 10)
        top_buttons = QHBoxLayout()
        top_buttons.addWidget(self.newChatButton, 1)
        top_buttons.addWidget(self.searchButton)
        sidebar_layout.addLayout(top_buttons)
        sidebar_layout.addWidget(self.searchPanel, 1)
        sidebar_layout.addWidget(self.conversationList, 1)
        manage = QHBoxLayout()
        manage.addWidget(self.renameButton)
        manage.addWidget(self.pinButton)
        manage.addWidget(self.deleteButton)
        sidebar_layout.addLayout(manage)

        self.modelPicker = ModelPicker()
        self.modelPicker.setObjectName("modelPicker")
        self.modelPicker.setSizeAdjustPolicy(QComboBox.SizeAdjustPolicy.AdjustToContents)
        self.modelLabel = QLabel()
        self.modelLabel.setBuddy(self.modelPicker)
        self.settingsButton = QPushButton()
        self.settingsButton.setObjectName("settingsButton")
        self.settingsButton.setCheckable(True)
        top = QHBoxLayout()
        top.addWidget(self.modelLabel)
        top.addWidget(self.modelPicker)
        top.addStretch(1)
        top.addWidget(self.settingsButton)

        self.undoBar = UndoBar()
        self.damagedBanner = QFrame()
        self.damagedBanner.setObjectName("damagedBanner")
        self.damagedLabel = _plain_label("damagedLabel")
        self.damagedLabel.setWordWrap(True)
        self.salvageButton = QPushButton()
        self.salvageButton.setObjectName("salvageButton")
        self.salvageButton.clicked.connect(self.salvage_export)
        self.restoreButton = QPushButton()
        self.restoreButton.setObjectName("restoreButton")
        self.restoreButton.clicked.connect(self.restore_from_backup)
        damaged = QHBoxLayout(self.damagedBanner)
        damaged.setContentsMargins(10, 4, 6, 4)
        damaged.addWidget(self.damagedLabel, 1)
        damaged.addWidget(self.salvageButton)
        damaged.addWidget(self.restoreButton)
        self.damagedBanner.setVisible(self._read_only)
        self.transcript = Transcript(confirm_open=confirm_open, open_url=open_url)
        self.transcript.set_thinking_display(self._services.settings.show_thinking)
        self.editBanner = QFrame()
        self.editBanner.setObjectName("editBanner")
        self.editLabel = _plain_label("editLabel")
        self.editLabel.setWordWrap(True)
        self.cancelEditButton = QPushButton()
        self.cancelEditButton.setObjectName("cancelEditButton")
        banner = QHBoxLayout(self.editBanner)
        banner.setContentsMargins(10, 4, 6, 4)
        banner.addWidget(self.editLabel, 1)
        banner.addWidget(self.cancelEditButton)
        self.editBanner.hide()
        self.contextMeter = ContextMeter()
        self.composer = Composer()
        self.sendButton = QPushButton()
        self.sendButton.setObjectName("sendButton")
        self.stopButton = QPushButton()
        self.stopButton.setObjectName("stopButton")
        self.stopButton.setEnabled(False)
        buttons = QVBoxLayout()
        buttons.addWidget(self.sendButton)
        buttons.addWidget(self.stopButton)
        buttons.addStretch(1)
        compose = QHBoxLayout()
        compose.addWidget(self.composer, 1)
        compose.addLayout(buttons)

        chat = QWidget()
        chat_layout = QVBoxLayout(chat)
        chat_layout.setContentsMargins(12, 10, 12, 10)
        chat_layout.addLayout(top)
        chat_layout.addWidget(self.undoBar)
        chat_layout.addWidget(self.damagedBanner)
        chat_layout.addWidget(self.transcript, 1)
        chat_layout.addWidget(self.editBanner)
        chat_layout.addWidget(self.contextMeter)
        chat_layout.addLayout(compose)

        self.settingsPanel = SettingsPanel()
        self.settingsPanel.preset_name_asker = self._ask
        self.settingsPanel.set_thinking_display(self._services.settings.show_thinking)
        self.settingsPanel.hide()

        self.splitter = QSplitter(Qt.Orientation.Horizontal)
        self.splitter.addWidget(sidebar)
        self.splitter.addWidget(chat)
        self.splitter.addWidget(self.settingsPanel)
        self.splitter.setStretchFactor(1, 1)
        self.splitter.setSizes([250, 850, 300])
        self.splitter.setChildrenCollapsible(False)
        self.setCentralWidget(self.splitter)

        self.statusBackend = _plain_label("statusBackend")
        self.statusGpu = _plain_label("statusGpu")
        self.statusStats = _plain_label("statusStats")
        self.statusBar().addPermanentWidget(self.statusBackend)
        self.statusBar().addPermanentWidget(self.statusGpu)
        self.statusBar().addPermanentWidget(self.statusStats)
        # Shows when the local API server is on, and when its requests are using the model.
        self.localServerIndicator = LocalServerIndicator(self._services)
        self.statusBar().addPermanentWidget(self.localServerIndicator)

        self._measure_timer = QTimer(self)
        self._measure_timer.setSingleShot(True)
        self._measure_timer.setInterval(MEASURE_DELAY_MS)
        self._measure_timer.timeout.connect(self._measure_context)

    def _build_menus(self) -> None:
        bar = self.menuBar()
        self.fileMenu = bar.addMenu("")
        self.newChatAction = self._action(
            self.fileMenu, "newChatAction", self.new_chat, QKeySequence.StandardKey.New
        )
        self.importAction = self._action(
            self.fileMenu, "importAction", self.import_chats, QKeySequence.StandardKey.Open
        )
        self.fileMenu.addSeparator()
        self.exportMarkdownAction = self._action(
            self.fileMenu, "exportMarkdownAction", lambda: self.export_current("md")
        )
        self.exportJsonAction = self._action(
            self.fileMenu, "exportJsonAction", lambda: self.export_current("json")
        )
        self.exportAllMarkdownAction = self._action(
            self.fileMenu, "exportAllMarkdownAction", lambda: self.export_all("md")
        )
        self.exportAllJsonAction = self._action(
            self.fileMenu, "exportAllJsonAction", lambda: self.export_all("json")
        )
        self.fileMenu.addSeparator()
        self.quitAction = self._action(self.fileMenu, "quitAction", self.close, QKeySequence.StandardKey.Quit)

        self.editMenu = bar.addMenu("")
        self.findAction = self._action(
            self.editMenu, "findAction", self.open_search, QKeySequence.StandardKey.Find
        )

        self.viewMenu = bar.addMenu("")
        self.settingsAction = self._action(
            self.viewMenu, "settingsAction", self.toggle_settings, QKeySequence("Ctrl+,")
        )
        self.settingsAction.setCheckable(True)
        self.modelsAction = self._action(
            self.viewMenu, "modelsAction", self.open_library, QKeySequence("Ctrl+Shift+M")
        )
        self.localServerAction = self._action(self.viewMenu, "localServerAction", self.open_local_server)
        self.serversAction = self._action(self.viewMenu, "serversAction", self.open_manage_servers)
        self.themeMenu = self.viewMenu.addMenu("")
        self._theme_actions: dict[str, QAction] = {}
        themes = QActionGroup(self)
        for choice in THEME_CHOICES:
            action = self.themeMenu.addAction("")
            action.setCheckable(True)
            action.setData(choice)
            action.setChecked(choice == self._services.settings.theme)
            action.triggered.connect(lambda _checked=False, c=choice: self.set_theme_choice(c))
            themes.addAction(action)
            self._theme_actions[choice] = action
        self.languageMenu = self.viewMenu.addMenu("")
        self._language_actions: dict[str, QAction] = {}
        languages = QActionGroup(self)
        for choice in LANGUAGES:
            action = self.languageMenu.addAction("")
            action.setCheckable(True)
            action.setChecked(choice == self._services.settings.language)
            action.triggered.connect(lambda _checked=False, c=choice: self.set_language(c))
            languages.addAction(action)
            self._language_actions[choice] = action

    def _action(
        self,
        menu: QMenu,
        name: str,
        slot: Callable[[], object],
        shortcut: QKeySequence | QKeySequence.StandardKey | None = None,
    ) -> QAction:
        action = menu.addAction("")
        action.setObjectName(name)
        action.triggered.connect(lambda _checked=False: slot())
        if shortcut is not None:
            action.setShortcut(shortcut)
            # Also on the window itself, so the shortcut works while the menu bar is hidden (macOS, tests).
            self.addAction(action)
        return action

    def _connect(self) -> None:
        self.newChatButton.clicked.connect(self.new_chat)
        self.searchButton.clicked.connect(self.open_search)
        self.renameButton.clicked.connect(self._rename_selected)
        self.pinButton.clicked.connect(self._toggle_pin_selected)
        self.deleteButton.clicked.connect(self._delete_selected)
        self.conversationList.currentItemChanged.connect(self._on_conversation_picked)
        self.conversationList.customContextMenuRequested.connect(self._conversation_menu)
        self.sendButton.clicked.connect(self._send)
        self.composer.submitted.connect(self._send)
        self.composer.textChanged.connect(self._schedule_measure)
        self.stopButton.clicked.connect(self._stop)
        self.cancelEditButton.clicked.connect(self.cancel_edit)
        self.modelPicker.activated.connect(self._on_model_picked)
        # Opening the picker tries again the servers that could not be listed.
        self.modelPicker.opening.connect(self._services.servers_service.retry_failed)
        self._services.servers_service.changed.connect(self._show_server_listings)
        self.settingsButton.toggled.connect(self._show_settings_panel)
        QShortcut(QKeySequence(Qt.Key.Key_Escape), self, self._escape)

        self.transcript.actionTriggered.connect(self._on_message_action)
        self.transcript.copied.connect(
            lambda _text: self.statusBar().showMessage(self.tr("Copied"), INFO_MESSAGE_MS)
        )
        self.searchPanel.searchRequested.connect(self._search)
        self.searchPanel.hitActivated.connect(self._open_hit)
        self.searchPanel.closed.connect(self._search_closed)
        self.undoBar.undoRequested.connect(self._undo_delete)
        self.undoBar.expired.connect(self._purge_deleted)
        self.contextMeter.policyClicked.connect(self._focus_policy)

        panel = self.settingsPanel
        panel.changed.connect(self._save_conversation_settings)
        panel.presetSaveRequested.connect(self._save_preset)
        panel.presetDeleteRequested.connect(self._delete_preset)
        panel.modelDefaultsRequested.connect(self._save_model_defaults)
        panel.resetRequested.connect(self._reset_conversation_settings)
        panel.overflowPolicyChanged.connect(self._set_overflow_policy)
        panel.thinkingDisplayChanged.connect(self._set_thinking_display)
        panel.closeRequested.connect(lambda: self.settingsButton.setChecked(False))

        chat = self._chat
        chat.replyStarted.connect(self._on_reply_started)
        chat.replyDelta.connect(self._on_reply_delta)
        chat.replyReasoningDelta.connect(self._on_reply_reasoning)
        chat.replyAnswerWasReasoning.connect(self._on_answer_was_reasoning)
        chat.replyContextNote.connect(self._on_context_note)
        chat.replyFinished.connect(self._on_reply_finished)
        chat.replyFailed.connect(self._on_reply_failed)
        chat.modelStatus.connect(self._on_model_status)
        chat.busyChanged.connect(self._update_controls)
        chat.conversationsChanged.connect(self.refresh_conversations)
        chat.contextUsage.connect(self._on_context_usage)
        self._services.gpu_monitor.status.connect(self._on_gpu_status)
        # Downloads, deletes and switches in the library panel: the picker follows the library.
        self._services.library_service.modelsChanged.connect(self._show_models)
        QGuiApplication.styleHints().colorSchemeChanged.connect(self._on_color_scheme)

    def retranslate(self) -> None:
        self.newChatButton.setText(self.tr("New chat"))
        self.searchButton.setText(self.tr("Search"))
        self.searchButton.setToolTip(self.tr("Search all chats (Ctrl+F)"))
        self.renameButton.setText(self.tr("Rename"))
        self.deleteButton.setText(self.tr("Delete"))
        self._update_pin_button()
        self.modelLabel.setText(self.tr("Model"))
        self.settingsButton.setText(self.tr("Settings"))
        self.settingsButton.setToolTip(self.tr("This chat's system prompt and sampling (Ctrl+,)"))
        self.editLabel.setText(
            self.tr("Editing your message. Sending makes a new version; the original stays one click away.")
        )
        self.cancelEditButton.setText(self.tr("Cancel"))
        self.damagedLabel.setText(
            self.tr(
                "The conversation database is damaged, so Hearth opened it read-only and changed nothing. "
                "Export your conversations, or restore a backup."
            )
        )
        self.salvageButton.setText(self.tr("Export all conversations…"))
        self.restoreButton.setText(self.tr("Restore from backup…"))
        self.composer.setPlaceholderText(
            self.tr("Message Hearth… (Enter to send, Shift+Enter for a new line)")
        )
        self.sendButton.setText(self.tr("Send"))
        self.stopButton.setText(self.tr("Stop"))
        self.fileMenu.setTitle(self.tr("&File"))
        self.newChatAction.setText(self.tr("&New chat"))
        self.importAction.setText(self.tr("&Import chats…"))
        self.exportMarkdownAction.setText(self.tr("Export chat as &Markdown…"))
        self.exportJsonAction.setText(self.tr("Export chat as &JSON…"))
        self.exportAllMarkdownAction.setText(self.tr("Export all chats as Markdown…"))
        self.exportAllJsonAction.setText(self.tr("Export all chats as JSON…"))
        self.quitAction.setText(self.tr("&Quit"))
        self.editMenu.setTitle(self.tr("&Edit"))
        self.findAction.setText(self.tr("&Find in chats"))
        self.viewMenu.setTitle(self.tr("&View"))
        self.settingsAction.setText(self.tr("Chat &settings"))
        self.modelsAction.setText(self.tr("&Models…"))
        self.localServerAction.setText(self.tr("Local API &server…"))
        self.serversAction.setText(self.tr("Se&rvers…"))
        self.themeMenu.setTitle(self.tr("&Theme"))
        theme_names = {
            "system": self.tr("Follow the system"),
            "light": self.tr("Light"),
            "dark": self.tr("Dark"),
        }
        for choice, action in self._theme_actions.items():
            action.setText(theme_names[choice])
        self.languageMenu.setTitle(self.tr("&Language"))
        for choice, action in self._language_actions.items():
            action.setText(LANGUAGES[choice] or self.tr("Follow the system"))
        self.searchPanel.retranslate()
        self.settingsPanel.retranslate()
        self.contextMeter.retranslate()
        self.undoBar.retranslate()
        self._update_controls()

    def changeEvent(self, event: QEvent) -> None:
        if event.type() == QEvent.Type.LanguageChange:
            self.retranslate()
        super().changeEvent(event)

    # -- state the tests and the smoke test look at ---------------------------------------------

    @property
    def current_conversation_id(self) -> int | None:
        return self._current_id

    @property
    def initial_load_done(self) -> bool:
        return self._models_loaded and self._conversations_loaded and self._status_known

    @property
    def editing_message_id(self) -> int | None:
        return self._editing

    @property
    def theme(self) -> Theme:
        return self._theme

    def current_messages(self) -> list[Message]:
        return list(self._messages.values())

    # -- background plumbing --------------------------------------------------------------------

    def _run(self, fn: Callable[[], T], on_done: Callable[[T], None], *, network: bool = False) -> None:
        """Run `fn` off the GUI thread; deliver its result here unless the window is gone by then.

        `network`: on the network worker, so a slow server never holds up database work."""

        if self._closed:
            return

        def done(result: T) -> None:
            if shiboken6.isValid(self) and not self._closed:
                on_done(result)

        def failed(error: Exception) -> None:
            if shiboken6.isValid(self) and not self._closed:
                self._show_error(str(error))

        (self._services.network if network else self._services.background).call(fn, done, failed)

    def _show_error(self, message: str) -> None:
        self.statusBar().showMessage(message, ERROR_MESSAGE_MS)

    def _show_info(self, message: str) -> None:
        self.statusBar().showMessage(message, INFO_MESSAGE_MS)

    # -- theme and language ---------------------------------------------------------------------

    def _apply_theme(self) -> None:
        theme = self._theme
        # The window's own style sheet and palette, not the application's: every window (and each test)
        # gets its theme without leaking into others.
        self.setStyleSheet(stylesheet(theme))
        self.setPalette(palette(theme))
        self.transcript.set_theme(theme)
        self.searchPanel.set_theme(theme)
        self.contextMeter.set_theme(theme)
        self._show_conversations(list(self._conversations.values()), loaded=self._conversations_loaded)

    def set_theme_choice(self, choice: str) -> None:
        if choice != self._services.settings.theme:
            self._services.update_settings(theme=choice)
        self._theme_actions[choice].setChecked(True)
        self._theme = resolve_theme(choice)
        self._apply_theme()

    def _on_color_scheme(self, scheme: Qt.ColorScheme) -> None:
        if self._services.settings.theme == "system":
            self._theme = resolve_theme("system", scheme)
            self._apply_theme()

    def set_language(self, choice: str) -> None:
        if choice != self._services.settings.language:
            self._services.update_settings(language=choice)
        self._language_actions[choice].setChecked(True)
        # Installing a translator posts every widget a LanguageChange (retranslate() answers it); the
        # window does not wait for those to be delivered.
        self._translations.install(choice)
        self.retranslate()

    # -- conversations --------------------------------------------------------------------------

    def refresh_conversations(self) -> None:
        self._run(self._services.store.list_conversations, self._show_conversations)

    def _show_conversations(self, conversations: Sequence[Conversation], *, loaded: bool = True) -> None:
        # The current conversation may be missing from a list read just before the chat service
        # created it; it stays current (only deleting it here ends it) and is selected next time.
        self._conversations_loaded = self._conversations_loaded or loaded
        self._conversations = {c.id: c for c in conversations}
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
                if conversation.id == self._current_id:
                    self.conversationList.setCurrentItem(item)
        finally:
            self.conversationList.blockSignals(False)
        self._update_controls()

    def _selected_conversation(self) -> tuple[int, str] | None:
        item = self.conversationList.currentItem()
        if item is None:
            return None
        return int(item.data(ID_ROLE)), item.text()

    def new_chat(self) -> None:
        # An edit still waiting to be saved belongs to the chat being left.
        self.settingsPanel.save_now()
        self._current_id = None
        self._load_generation += 1
        self._messages = {}
        self.cancel_edit()
        self.conversationList.blockSignals(True)
        self.conversationList.setCurrentRow(-1)
        self.conversationList.blockSignals(False)
        self.transcript.clear()
        self._update_controls()
        self._load_settings_panel(None)
        self._schedule_measure()
        self.composer.setFocus()

    def _on_conversation_picked(
        self, item: QListWidgetItem | None, _previous: QListWidgetItem | None
    ) -> None:
        if item is None:
            return
        self.open_conversation(int(item.data(ID_ROLE)))

    def open_conversation(self, conversation_id: int, focus_message: int | None = None) -> None:
        """Show a conversation; with `focus_message`, switch to the branch holding it and scroll to it."""
        if conversation_id != self._current_id:
            self.cancel_edit()
            self.settingsPanel.save_now()
        self._current_id = conversation_id
        self._load_generation += 1
        generation = self._load_generation
        if focus_message is None:
            self.transcript.clear()
        self._update_controls()
        store = self._services.store
        live = self._live
        streaming_here = live is not None and live.conversation_id == conversation_id

        def load() -> list[Message]:
            # Switching branches under a reply being written would move its siblings; show it as it is.
            if focus_message is not None and not streaming_here:
                return store.switch_to(focus_message)
            return store.list_messages(conversation_id)

        self._run(
            load, lambda messages: self._show_messages(generation, conversation_id, messages, focus_message)
        )
        edits = self._settings_edits
        self._run(
            lambda: store.get_conversation(conversation_id),
            lambda conversation: self._conversation_loaded(conversation, edits),
        )

    def _show_messages(
        self,
        generation: int,
        conversation_id: int,
        messages: Sequence[Message],
        focus: int | None = None,
    ) -> None:
        if generation != self._load_generation:
            return
        self._messages = {m.id: m for m in messages}
        entries = [entry_for(message) for message in messages]
        if self._live is not None and conversation_id == self._live.conversation_id:
            entries = self._with_live_reply(entries)
        self.transcript.set_entries(entries)
        if focus is not None and focus in self._messages:
            if focus == self._thinking_hit:
                self.transcript.expand_thinking(focus)
            self.transcript.scroll_to_message(focus, flash=True)
        else:
            self.transcript.scroll_to_bottom()
        self._thinking_hit = None
        self._schedule_measure()

    def _with_live_reply(self, entries: list[TranscriptEntry]) -> list[TranscriptEntry]:
        """The database holds the reply as of its last flush; the text in memory is newer."""
        live = self._live
        assert live is not None
        ids = [entry.message_id for entry in entries]
        if live.user_id not in ids and live.user_text is not None:
            entries.append(TranscriptEntry(live.user_id, "user", live.user_text))
        text = "".join(live.parts)
        thought = None
        if live.thinking_since is not None:
            thought = (live.answer_since or time.monotonic()) - live.thinking_since
        streaming = TranscriptEntry(
            live.assistant_id,
            "assistant",
            text,
            "streaming",
            context_note=live.note,
            reasoning="".join(live.reasoning) or None,
            reasoning_seconds=thought,
        )
        return [entry for entry in entries if entry.message_id != live.assistant_id] + [streaming]

    def _refresh_current(self) -> None:
        """Re-read the visible branch (sibling counts, provenance) without re-rendering unchanged rows."""
        conversation_id = self._current_id
        if conversation_id is None:
            return
        generation = self._load_generation
        store = self._services.store

        def show(messages: list[Message]) -> None:
            if generation != self._load_generation or self._live is not None:
                return
            self._messages = {m.id: m for m in messages}
            self.transcript.sync_entries([entry_for(m) for m in messages])

        self._run(lambda: store.list_messages(conversation_id), show)

    def _show_path(self, messages: Sequence[Message], focus: int | None) -> None:
        """Show a branch the store just switched to (or changed), keeping `focus` in view."""
        self._messages = {m.id: m for m in messages}
        self.transcript.sync_entries([entry_for(m) for m in messages])
        if focus is not None and focus in self._messages:
            self.transcript.scroll_to_message(focus)
        self._schedule_measure()

    def _rename_selected(self) -> None:
        selected = self._selected_conversation()
        if selected is not None:
            self.rename_conversation(*selected)

    def rename_conversation(self, conversation_id: int, title: str) -> None:
        new_title = self._ask(self, self.tr("Rename chat"), self.tr("New name:"), title)
        if new_title is None or not new_title.strip():
            return
        store = self._services.store
        self._run(
            lambda: store.rename_conversation(conversation_id, new_title.strip()),
            lambda _renamed: self.refresh_conversations(),
        )

    def _toggle_pin_selected(self) -> None:
        item = self.conversationList.currentItem()
        if item is not None:
            self.set_pinned(int(item.data(ID_ROLE)), not bool(item.data(PINNED_ROLE)))

    def set_pinned(self, conversation_id: int, pinned: bool) -> None:
        store = self._services.store
        self._run(lambda: store.set_pinned(conversation_id, pinned), lambda _c: self.refresh_conversations())

    def _update_pin_button(self) -> None:
        item = self.conversationList.currentItem()
        pinned = item is not None and bool(item.data(PINNED_ROLE))
        self.pinButton.setText(self.tr("Unpin") if pinned else self.tr("Pin"))

    def _delete_selected(self) -> None:
        selected = self._selected_conversation()
        if selected is not None:
            self.delete_conversation(*selected)

    def delete_conversation(self, conversation_id: int, title: str) -> None:
        """Moves it to the trash; the undo bar offers it back until it expires."""
        if self._chat.busy and self._live is not None and conversation_id == self._live.conversation_id:
            self._show_error(self.tr("Stop the reply before deleting this chat."))
            return
        if conversation_id == self._current_id:
            self.new_chat()
        store = self._services.store

        def trashed(_none: None) -> None:
            self.undoBar.show_deleted(conversation_id, title)
            self.refresh_conversations()

        self._run(lambda: store.trash_conversation(conversation_id), trashed)

    def _undo_delete(self, conversation_id: int) -> None:
        store = self._services.store

        def restored(conversation: Conversation) -> None:
            self.refresh_conversations()
            self.open_conversation(conversation.id)

        self._run(lambda: store.restore_conversation(conversation_id), restored)

    def _purge_deleted(self, _conversation_id: int) -> None:
        self._run(self._services.store.purge_trashed, lambda _count: None)

    def _conversation_menu(self, pos: QPoint) -> None:
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
            self.tr("Export as Markdown…"), lambda: self.export_conversation(conversation_id, "md")
        )
        menu.addAction(self.tr("Export as JSON…"), lambda: self.export_conversation(conversation_id, "json"))
        menu.addSeparator()
        menu.addAction(self.tr("Delete"), lambda: self.delete_conversation(conversation_id, title))
        menu.exec(self.conversationList.viewport().mapToGlobal(pos))

    # -- search ---------------------------------------------------------------------------------

    def open_search(self) -> None:
        self.conversationList.hide()
        self.searchPanel.open()

    def close_search(self) -> None:
        self.searchPanel.close_panel()

    def _search_closed(self) -> None:
        self.conversationList.show()
        self.composer.setFocus()

    def _search(self, query: str) -> None:
        store = self._services.store
        self._run(lambda: store.search(query), lambda hits: self._show_hits(query, hits))

    def _show_hits(self, query: str, hits: list[SearchHit]) -> None:
        self.searchPanel.show_results(query, hits)

    def _open_hit(self, conversation_id: int, message_id: int | None) -> None:
        self.conversationList.blockSignals(True)
        for row in range(self.conversationList.count()):
            item = self.conversationList.item(row)
            if int(item.data(ID_ROLE)) == conversation_id:
                self.conversationList.setCurrentItem(item)
        self.conversationList.blockSignals(False)
        in_thinking = any(
            hit.in_reasoning
            for hit in self.searchPanel.hits
            if (hit.conversation_id, hit.message_id) == (conversation_id, message_id)
        )
        self._thinking_hit = message_id if in_thinking else None
        self.open_conversation(conversation_id, focus_message=message_id)

    # -- export and import ----------------------------------------------------------------------

    def export_current(self, fmt: str) -> None:
        if self._current_id is None:
            self._show_error(self.tr("Open a chat to export it."))
            return
        self.export_conversation(self._current_id, fmt)

    def export_conversation(self, conversation_id: int, fmt: str) -> None:
        conversation = self._conversations.get(conversation_id)
        suggested = export_filename(conversation, fmt) if conversation else f"chat-{conversation_id}.{fmt}"
        name_filter = self.tr("Markdown (*.md)") if fmt == "md" else self.tr("JSON (*.json)")
        path = self._ask_save(self, self.tr("Export chat"), suggested, name_filter)
        if path is None:
            return
        services = self._services
        self._run(
            lambda: services.export_conversation(conversation_id, path, fmt),
            lambda written: self._show_info(self.tr("Exported to {path}").format(path=written)),
        )

    def export_all(self, fmt: str) -> None:
        folder = self._ask_folder(self, self.tr("Export all chats to a folder"))
        if folder is None:
            return
        store = self._services.store

        def done(report: ExportReport) -> None:
            message = self.tr("Exported %n chat(s) to {folder}", "", len(report.written)).format(
                folder=folder
            )
            if report.unreadable:
                message += " · " + self.tr("%n could not be read", "", len(report.unreadable))
            self._show_info(message)

        self._run(lambda: store.export_all(folder, fmt), done)

    def import_chats(self) -> None:
        path = self._ask_open(
            self, self.tr("Import chats (Hearth JSON or ChatGPT conversations.json)"), CHAT_FILES
        )
        if path is None:
            return
        store = self._services.store
        self._run(lambda: store.import_file(path), self._imported)

    # -- a damaged database ----------------------------------------------------------------------

    def salvage_export(self) -> None:
        """Export every conversation that can still be read from the damaged database, as JSON."""
        folder = self._ask_folder(self, self.tr("Export all conversations to a folder"))
        if folder is None:
            return
        store = self._services.store
        self._run(lambda: store.export_all(folder, "json"), self._salvaged)

    def _salvaged(self, report: ExportReport) -> None:
        message = self.tr("Exported %n conversation(s)", "", len(report.written))
        if report.unreadable:
            message += " · " + self.tr("%n could not be read", "", len(report.unreadable))
        self._show_info(message)

    def restore_from_backup(self) -> None:
        paths = self._services.paths
        self._run(lambda: list_backups(paths), self._choose_backup)

    def _choose_backup(self, backups: list[BackupInfo]) -> None:
        if not backups:
            folder = self._services.paths.backups_dir
            self._show_error(self.tr("There are no backups in {folder}.").format(folder=folder))
            return
        names = [f"{b.created.astimezone():%Y-%m-%d %H:%M} · {b.path.name}" for b in backups]
        index = self._ask_choice(self, self.tr("Restore from backup"), self.tr("Backup to restore:"), names)
        if index is None:
            return
        question = self.tr(
            "Replace the damaged database with this backup? The damaged file is kept in the backups folder."
        )
        if not self._confirm(self, self.tr("Restore from backup"), question, self.tr("Restore")):
            return
        services, chosen = self._services, backups[index].path

        def restore() -> RestoreResult:
            # Its read-only connections let go of the file before it is moved aside.
            services.core.db.dispose()
            return restore_backup(services.paths, chosen, lock_held=True)

        self._run(restore, self._restored)

    def _restored(self, result: RestoreResult) -> None:
        self.damagedLabel.setText(
            self.tr("Restored from {name}. Start Hearth again to continue writing.").format(
                name=result.restored_from.name
            )
        )
        self.restoreButton.setEnabled(False)
        self.refresh_conversations()

    def _imported(self, report: ImportReport) -> None:
        source = self.tr("ChatGPT export") if report.source == "chatgpt" else self.tr("Hearth export")
        message = self.tr("Imported %n chat(s) from the {source}", "", report.conversations).format(
            source=source
        )
        if report.skipped:
            message += " · " + self.tr("%n message(s) left out (system, tool or empty)", "", report.skipped)
        self._show_info(message)
        self.refresh_conversations()
        if report.conversation_ids:
            self.open_conversation(report.conversation_ids[0])

    # -- per-conversation settings and presets --------------------------------------------------

    def open_local_server(self) -> None:
        if self._local_server_dialog is None:
            self._local_server_dialog = LocalServerDialog(self._services, parent=self)
        self._local_server_dialog.show()
        self._local_server_dialog.raise_()
        self._local_server_dialog.activateWindow()

    def open_library(self) -> None:
        if self._library_dialog is None:
            self._library_dialog = LibraryDialog(self._services, confirm=self._confirm, parent=self)
        self._library_dialog.show()
        self._library_dialog.raise_()
        self._library_dialog.activateWindow()

    def toggle_settings(self) -> None:
        self.settingsButton.setChecked(not self.settingsButton.isChecked())

    def _show_settings_panel(self, shown: bool) -> None:
        self.settingsPanel.setVisible(shown)
        self.settingsAction.setChecked(shown)
        sizes = self.splitter.sizes()
        if shown and sizes[2] == 0:
            # Hidden when the splitter was first sized, the panel would open with no width at all.
            width = min(SETTINGS_PANEL_WIDTH, max(0, sizes[1] - 300))
            self.splitter.setSizes([sizes[0], sizes[1] - width, width])
        if shown:
            self._load_settings_panel(self._conversations.get(self._current_id) if self._current_id else None)

    def _focus_policy(self) -> None:
        self.settingsButton.setChecked(True)
        self.settingsPanel.overflowPolicy.setFocus()

    def _conversation_loaded(self, conversation: Conversation, edits: int) -> None:
        if conversation.id != self._current_id:
            return
        # An edit made while this was loading is newer than what was read; it is (being) saved.
        if edits == self._settings_edits and not self.settingsPanel.has_unsaved_edit:
            self._conversations[conversation.id] = conversation
            self._load_settings_panel(conversation)

    def _load_settings_panel(self, conversation: Conversation | None) -> None:
        model = self._selected_model() or ""
        resolved = self._chat.engine.generation_settings(conversation, model)
        values: dict[str, Any] = asdict(resolved.sampling)
        values["context_length"] = resolved.context_length
        if conversation is None:
            scope = self.tr("Settings for the next new chat with {model}.").format(model=model or "—")
        elif conversation.settings:
            scope = self.tr("This chat's own settings.")
        else:
            scope = self.tr(
                "This chat follows the defaults for {model}; a change here is saved for this chat."
            ).format(model=model or "—")
        self.settingsPanel.load(
            scope, resolved.system_prompt, values, self._services.settings.overflow_policy
        )

    def _save_conversation_settings(self, system_prompt: str | None, values: dict[str, Any]) -> None:
        self._settings_edits += 1
        store = self._services.store
        conversation_id = self._current_id
        if conversation_id is not None:
            self._run(
                lambda: store.set_conversation_settings(conversation_id, system_prompt, values),
                self._settings_saved,
            )
            return
        # A new chat: it exists from now on, so the first message is sent with these settings.
        self._creating = True

        def create() -> Conversation:
            conversation = store.create_conversation()
            return store.set_conversation_settings(conversation.id, system_prompt, values)

        def created(conversation: Conversation) -> None:
            self._creating = False
            if self._current_id is None:
                self._current_id = conversation.id
                self._load_generation += 1
            self._settings_saved(conversation)
            self.refresh_conversations()
            waiting, self._after_creation = self._after_creation, []
            for step in waiting:
                step()

        self._run(create, created)

    def _settings_saved(self, conversation: Conversation) -> None:
        self._conversations[conversation.id] = conversation
        self._show_info(self.tr("Settings saved for this chat"))
        self._schedule_measure()

    def _reset_conversation_settings(self) -> None:
        conversation_id = self._current_id
        if conversation_id is None:
            self._load_settings_panel(None)
            return
        store = self._services.store

        def reset(conversation: Conversation) -> None:
            self._conversations[conversation.id] = conversation
            self._load_settings_panel(conversation)
            self._schedule_measure()

        self._run(lambda: store.set_conversation_settings(conversation_id, None, {}), reset)

    def _save_model_defaults(self, system_prompt: str | None, values: dict[str, Any]) -> None:
        model = self._selected_model()
        if model is None:
            return
        defaults = dict(self._services.settings.model_defaults)
        defaults[model] = {**values, "system_prompt": system_prompt}
        self._services.update_settings(model_defaults=defaults)
        self._show_info(self.tr("New chats with {model} start from these settings").format(model=model))

    def _set_thinking_display(self, display: str) -> None:
        self._services.update_settings(show_thinking=display)
        self.transcript.set_thinking_display(display)

    def _set_overflow_policy(self, policy: str) -> None:
        self._services.update_settings(overflow_policy=policy)
        self.contextMeter.set_policy(policy)
        self._schedule_measure()

    def _refresh_presets(self) -> None:
        home = self._services.paths.home
        self._run(lambda: list_presets(home), self._show_presets)

    def _show_presets(self, presets: list[Preset]) -> None:
        self._presets = presets
        choices = []
        for preset in presets:
            choices.append(PresetChoice(preset.name, preset.builtin, preset.system_prompt, preset.settings()))
        self.settingsPanel.set_presets(choices)

    def _save_preset(self, name: str, system_prompt: str | None, values: dict[str, Any]) -> None:
        sampling_values = {k: v for k, v in values.items() if k != "context_length"}
        preset = Preset(
            name=name,
            system_prompt=system_prompt,
            sampling=SamplingParams(**sampling_values),
            context_length=values.get("context_length"),
        )
        home = self._services.paths.home

        def saved(_result: object) -> None:
            self._show_info(self.tr("Preset “{name}” saved").format(name=name))
            self._refresh_presets()

        self._run(lambda: save_preset(home, preset), saved)

    def _delete_preset(self, name: str) -> None:
        question = self.tr("Delete the preset “{name}”?").format(name=name)
        if not self._confirm(self, self.tr("Delete preset"), question, self.tr("Delete")):
            return
        home = self._services.paths.home
        self._run(lambda: delete_preset(home, name), lambda _r: self._refresh_presets())

    # -- models and status ----------------------------------------------------------------------

    def _show_models(self, models: Sequence[InstalledModel]) -> None:
        self._models_loaded = True
        self._local_models = list(models)
        self._fill_model_picker()
        self._prepare_selected()

    def _prepare_selected(self) -> None:
        model = self._selected_model()
        if model is None or not self._preload_model or self._chat.busy:
            return
        local = next((m for m in self._local_models if m.name == model), None)
        # A model that crashed the runner last time waits for the user to ask for it again, and says so.
        if local is not None and local.last_load_error:
            self.statusBar().showMessage(
                self.tr(
                    "{model} was not loaded automatically: it crashed last time ({error}). "
                    "Send a message to try it again."
                ).format(model=model, error=local.last_load_error),
                ERROR_MESSAGE_MS,
            )
            return
        # For a model on a server this loads nothing; the status bar then names the server.
        self._chat.preload(model)
        self._schedule_measure()

    def _fill_model_picker(self) -> bool:
        """Local models, then each server's, then "Add server…" and "Manage servers…". Returns whether the
        selection changed."""
        picker = self.modelPicker
        before = self._selected_model()
        picker.clear()
        for model in self._local_models:
            picker.addItem(model.name, model.name)
        for listing in self._server_listings:
            if listing.error is not None:
                reason = unavailable_text(listing.error_kind)
                picker.addItem(f"{listing.server.name}: {reason}", None)
                # The server's own words: shown as written, never as markup.
                picker.setItemData(
                    picker.count() - 1, plain_tooltip(listing.error), Qt.ItemDataRole.ToolTipRole
                )
                item = cast(QStandardItemModel, picker.model()).item(picker.count() - 1)
                item.setEnabled(False)
            for remote in listing.models:
                name = f"{listing.server.name}/{remote.id}"
                picker.addItem(name, name)
        picker.insertSeparator(picker.count())
        picker.addItem(self.tr("Add server…"), ADD_SERVER)
        if self._services.servers_service.entries():
            picker.addItem(self.tr("Manage servers…"), MANAGE_SERVERS)
        models = [
            i for i in range(picker.count()) if picker.itemData(i) not in (None, ADD_SERVER, MANAGE_SERVERS)
        ]
        wanted = [picker.findData(name) for name in (self._services.settings.default_model, before) if name]
        found = [i for i in wanted if i >= 0]
        picker.setCurrentIndex(found[0] if found else models[0] if models else -1)
        if not models:
            picker.setPlaceholderText(self.tr("No models installed"))
        self._last_model = self._selected_model()
        self._update_controls()
        if models:
            self._load_settings_panel(self._conversations.get(self._current_id) if self._current_id else None)
        return self._selected_model() != before

    def _show_server_listings(self) -> None:
        if self._closed:
            return
        service = self._services.servers_service
        listings, managed = service.listings(), bool(service.entries())
        if listings == self._server_listings and managed == (self.modelPicker.findData(MANAGE_SERVERS) >= 0):
            return  # a server is being checked: nothing the picker shows changed
        self._server_listings = listings
        if self._fill_model_picker() and self._models_loaded:
            self._prepare_selected()

    def open_add_server(self) -> ServerDialog:
        dialog = ServerDialog(self._services.servers, self._services.network, self, ask_open=self._ask_open)
        dialog.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)
        dialog.added.connect(self._on_server_added)
        self.serverDialog = dialog
        dialog.open()
        return dialog

    def open_manage_servers(self) -> ServersDialog:
        if self.serversDialog is None:
            self.serversDialog = ServersDialog(
                self._services.servers_service, self, confirm=self._confirm, ask_open=self._ask_open
            )
            self.serversDialog.addRequested.connect(self.open_add_server)
        self.serversDialog.show()
        self.serversDialog.raise_()
        self.serversDialog.activateWindow()
        return self.serversDialog

    def _on_server_added(self, added: ServerAdded) -> None:
        self._services.servers_service.add(added.server, added.models)
        message = self.tr("Added {server} with {count} models").format(
            server=added.server.name, count=len(added.models)
        )
        self._show_info(f"{message}. {added.key_note}" if added.key_note else message)

    def _selected_model(self) -> str | None:
        name = self.modelPicker.currentData()
        return name if isinstance(name, str) and name not in (ADD_SERVER, MANAGE_SERVERS) else None

    def _on_model_picked(self, index: int) -> None:
        chosen = self.modelPicker.itemData(index)
        if chosen in (ADD_SERVER, MANAGE_SERVERS):
            previous = self.modelPicker.findData(self._last_model) if self._last_model else -1
            self.modelPicker.setCurrentIndex(previous)
            if chosen == ADD_SERVER:
                self.open_add_server()
            else:
                self.open_manage_servers()
            return
        self._last_model = self._selected_model()
        model = self._selected_model()
        if model is not None and model != self._services.settings.default_model:
            self._services.update_settings(default_model=model)
        if model is not None and self._preload_model and not self._chat.busy:
            self._chat.preload(model)
        self._load_settings_panel(self._conversations.get(self._current_id) if self._current_id else None)
        self._schedule_measure()

    def _on_model_status(self, status: ModelStatus) -> None:
        self._status_known = True
        self.statusBackend.setText(status.summary)
        # Tooltips are rich text when they look like HTML, so the detail is escaped first.
        tips = "".join(f"<p>{html.escape(tip)}</p>" for tip in (status.detail, status.kernels) if tip)
        self.statusBackend.setToolTip(tips)
        if status.state == "failed" or (status.state == "ready" and status.detail):
            self.statusBar().showMessage(status.detail or status.summary, ERROR_MESSAGE_MS)

    def _on_gpu_status(self, report: HardwareReport) -> None:
        text, tip = describe_gpu(report)
        self.statusGpu.setText(text)
        self.statusGpu.setToolTip(f"<p>{html.escape(tip)}</p>" if tip else "")

    # -- context budget -------------------------------------------------------------------------

    def _schedule_measure(self) -> None:
        self._measure_timer.start()

    def _measure_context(self) -> None:
        model = self._selected_model()
        # Measuring loads the model; a window told not to preload (the smoke test) leaves it alone.
        if model is None or not self._preload_model or self._closed or self._creating:
            return
        if split_model_name(model) is not None:
            # A server counts with its own tokenizer and enforces its own context.
            self.contextMeter.set_usage(None)
            return
        self._chat.measure_context(self._current_id, self.composer.toPlainText(), model)

    def _on_context_usage(self, usage: ContextUsage) -> None:
        self.contextMeter.set_usage(usage)

    # -- sending and streaming ------------------------------------------------------------------

    def _send(self) -> None:
        prompt = self.composer.toPlainText()
        model = self._selected_model()
        if not prompt.strip() or self._chat.busy or self._pending is not None:
            return
        if model is None:
            self._show_error(self.tr("Install a model before sending a message."))
            return
        self.settingsPanel.save_now()
        if self._creating:
            self._after_creation.append(self._send)
            return
        self.composer.clear()
        if self._editing is not None:
            target = self._editing
            self.cancel_edit()
            self._pending = _Request("edit", self._current_id, prompt, target)
            self._chat.edit(target, prompt, model)
        else:
            self._pending = _Request("send", self._current_id, prompt)
            self._chat.send(self._current_id, prompt, model)

    def regenerate(self, message_id: int) -> None:
        model = self._selected_model()
        if model is None or self._chat.busy or self._pending is not None:
            return
        self._pending = _Request("regenerate", self._current_id, "", message_id)
        self._chat.regenerate(message_id, model)

    def begin_edit(self, message_id: int) -> None:
        message = self._messages.get(message_id)
        if message is None or message.role != "user":
            return
        self._editing = message_id
        self.composer.setPlainText(message.content)
        self.editBanner.show()
        self.composer.setFocus()

    def cancel_edit(self) -> None:
        if self._editing is None:
            return
        self._editing = None
        self.editBanner.hide()
        self.composer.clear()

    def _stop(self) -> None:
        # Escape works anywhere in the window; with nothing running there is nothing to cancel.
        if self._chat.busy:
            self._chat.stop()

    def _escape(self) -> None:
        if self._chat.busy:
            self._chat.stop()
        elif self._editing is not None:
            self.cancel_edit()
        elif self.searchPanel.isVisible():
            self.close_search()

    def _on_message_action(self, action: str, message_id: int) -> None:
        if action == "regenerate":
            self.regenerate(message_id)
        elif action == "edit":
            self.begin_edit(message_id)
        elif action == "delete":
            self._delete_message(message_id)
        elif action in ("previous", "next"):
            self._switch_sibling(message_id, -1 if action == "previous" else 1)
        elif action == "info":
            self._show_provenance(message_id)

    def _switch_sibling(self, message_id: int, step: int) -> None:
        if self._chat.busy:
            return
        store = self._services.store

        def switch() -> tuple[int, list[Message]]:
            siblings = store.siblings(message_id)
            ids = [s.id for s in siblings]
            index = ids.index(message_id) + step if message_id in ids else 0
            target = ids[max(0, min(len(ids) - 1, index))]
            return target, store.switch_to(target)

        self._run(switch, lambda found: self._show_path(found[1], found[0]))

    def _delete_message(self, message_id: int) -> None:
        message = self._messages.get(message_id)
        if message is None or self._chat.busy:
            return
        question = self.tr("Delete this message and everything after it on this branch? Other versions stay.")
        if not self._confirm(self, self.tr("Delete message"), question, self.tr("Delete")):
            return
        store = self._services.store
        self._run(lambda: store.delete_message(message_id), lambda path: self._show_path(path, None))

    def _show_provenance(self, message_id: int) -> None:
        message = self._messages.get(message_id)
        if message is None:
            return
        library = self._services.library

        def model_file() -> str | None:
            if not message.model_name:
                return None
            try:
                return library.get(message.model_name).path.name
            except HearthError:
                # Removed from the library since: the dialog says "not recorded".
                return None

        def show(file_name: str | None) -> None:
            dialog = ProvenanceDialog(message, file_name, self)
            dialog.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)
            self._dialogs = [d for d in self._dialogs if shiboken6.isValid(d)] + [dialog]
            dialog.open()

        self._run(model_file, show)

    def _on_reply_started(
        self, conversation_id: int, user_message_id: int, assistant_message_id: int
    ) -> None:
        request = self._pending or _Request("send", conversation_id)
        self._pending = None
        user_text = request.text if request.kind in ("send", "edit") else None
        self._live = _Live(conversation_id, user_message_id, user_text, assistant_message_id)
        if self._current_id is None and request.conversation_id is None:
            # Sent from "New chat": the window follows the conversation the service just created.
            self._current_id = conversation_id
            self._load_generation += 1
        if conversation_id != self._current_id:
            return
        if request.kind in ("regenerate", "edit") and request.target is not None:
            self.transcript.remove_from(request.target)
        if user_text is not None:
            self.transcript.add_entry(TranscriptEntry(user_message_id, "user", user_text))
        self.transcript.add_entry(TranscriptEntry(assistant_message_id, "assistant", "", "streaming"))
        self.transcript.scroll_to_bottom()
        self._update_controls()

    def _on_context_note(self, assistant_message_id: int, note: str) -> None:
        if self._live is not None and self._live.assistant_id == assistant_message_id:
            self._live.note = note
            self.transcript.annotate(assistant_message_id, note)

    def _on_reply_delta(self, assistant_message_id: int, text: str) -> None:
        live = self._live
        if live is None or assistant_message_id != live.assistant_id:
            return
        live.parts.append(text)
        if live.thinking_since is not None and live.answer_since is None:
            live.answer_since = time.monotonic()
        self.transcript.append_delta(assistant_message_id, text)

    def _on_reply_reasoning(self, assistant_message_id: int, text: str) -> None:
        live = self._live
        if live is None or assistant_message_id != live.assistant_id:
            return
        if live.thinking_since is None:
            live.thinking_since = time.monotonic()
        live.reasoning.append(text)
        self.transcript.append_reasoning(assistant_message_id, text)

    def _on_answer_was_reasoning(self, assistant_message_id: int) -> None:
        live = self._live
        if live is None or assistant_message_id != live.assistant_id:
            return
        live.reasoning = [*live.parts, *live.reasoning]
        live.parts = []
        live.thinking_since = live.thinking_since or time.monotonic()
        live.answer_since = None
        self.transcript.answer_was_reasoning(assistant_message_id)

    def _on_reply_finished(self, assistant_message_id: int, stats: GenerationStats, status: str) -> None:
        note = self._live.note if self._live is not None else None
        reply_stats = ReplyStats(
            stats.time_to_first_token_s, stats.tokens_per_second, stats.completion_tokens, stats.prompt_tokens
        )
        self.transcript.finish(assistant_message_id, status, reply_stats, context_note=note)
        self.statusStats.setText(
            self.tr("Last reply: TTFT {ttft} s · {rate} tok/s").format(
                ttft=f"{stats.time_to_first_token_s:.2f}", rate=f"{stats.tokens_per_second:.1f}"
            )
        )
        self._end_stream()

    def _on_reply_failed(self, assistant_message_id: int, kind: str, message: str) -> None:
        log.info("reply failed (%s): %s", kind, message)
        self._show_error(message)
        request, self._pending = self._pending, None
        if assistant_message_id >= 0:
            self.transcript.finish(assistant_message_id, "error", error=message)
        elif request is not None and request.text and not self.composer.toPlainText():
            # The reply never started; hand the prompt back so nothing typed is lost.
            self.composer.setPlainText(request.text)
            if request.kind == "edit" and request.target is not None:
                self.begin_edit(request.target)
                self.composer.setPlainText(request.text)
        self._end_stream()

    def _end_stream(self) -> None:
        self._live = None
        self._update_controls()
        self._refresh_current()
        self._schedule_measure()

    def _update_controls(self, _busy: bool | None = None) -> None:
        busy = self._chat.busy
        has_model = self._selected_model() is not None
        selected = self.conversationList.currentItem() is not None
        writable = not self._read_only
        self.sendButton.setEnabled(has_model and not busy and writable)
        self.stopButton.setEnabled(busy)
        # Enabled without models too: "Add server…" is in it.
        self.modelPicker.setEnabled(not busy and writable)
        self.composer.setEnabled(writable)
        for control in (self.renameButton, self.pinButton, self.deleteButton):
            control.setEnabled(selected and writable)
        for action in (self.newChatAction, self.importAction):
            action.setEnabled(writable)
        self.newChatButton.setEnabled(writable)
        self._update_pin_button()
        self.transcript.set_editing_enabled(not busy and writable)
        has_chat = self._current_id is not None
        self.exportMarkdownAction.setEnabled(has_chat)
        self.exportJsonAction.setEnabled(has_chat)

    def closeEvent(self, event: QCloseEvent) -> None:
        # A delete still waiting for its undo becomes final before the services stop.
        self.undoBar.expire_now()
        self._closed = True
        if self._owns_translations:
            self._translations.remove()
        super().closeEvent(event)
