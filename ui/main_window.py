"""Hearth's main window: conversations on the left, the transcript and composer in the middle, the chat's
settings on the right.

A shell: the chat's state is the Qt-free `ChatSession`; the sidebar, the chat area, the settings pane, the
menus and the status line each show their part of it, and this window only puts them together. Every read
or write of conversations, presets and models goes through `services.background` or the chat service, so
the event loop never waits on the database or the model.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TypeVar

import shiboken6
from PySide6.QtCore import QEvent, Qt
from PySide6.QtGui import QCloseEvent, QDesktopServices, QGuiApplication, QKeySequence, QShortcut
from PySide6.QtWidgets import QMainWindow, QSplitter

from app.chat.session import ChatSession, ReplyFinished
from app.conversations.store import Conversation, Message
from app.qt.services import AppServices
from app.qt.session_feed import SessionFeed
from ui.chat_area import ChatArea
from ui.chat_files import ChatFiles
from ui.chat_settings import ChatSettings
from ui.dialogs import (
    AskChoice,
    AskDirectory,
    AskOpenPath,
    AskOpenPaths,
    AskSavePath,
    AskText,
    ConfirmAction,
    Dialogs,
    ask_choice,
    ask_directory,
    ask_open_path,
    ask_open_paths,
    ask_save_path,
    ask_text,
    confirm_action,
)
from ui.documents_panel import DocumentsDialog
from ui.highlight import warm_up as warm_up_highlighting
from ui.i18n import Translations
from ui.library_panel import LibraryDialog
from ui.local_server_panel import LocalServerDialog
from ui.menus import MainMenus
from ui.model_import import ModelImportDialog, ModelImporter
from ui.safe_browser import ConfirmOpen, OpenUrl, confirm_open_url
from ui.server_dialog import ServerDialog
from ui.servers_panel import ServersDialog
from ui.sidebar import Sidebar
from ui.status_line import StatusLine
from ui.theme import Theme, palette, resolve_theme, stylesheet
from ui.tools_panel import ToolsDialog
from ui.window_context import WindowContext

T = TypeVar("T")

SETTINGS_PANEL_WIDTH = 320


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
        ask_open_many: AskOpenPaths = ask_open_paths,
        confirm_open: ConfirmOpen = confirm_open_url,
        open_url: OpenUrl = QDesktopServices.openUrl,
        translations: Translations | None = None,
        preload_model: bool = True,
    ) -> None:
        super().__init__()
        self._services = services
        self._translations = translations or Translations()
        self._owns_translations = translations is None
        self._theme: Theme = resolve_theme(services.settings.theme)
        self._conversations_loaded = False
        self._library_dialog: LibraryDialog | None = None
        self._local_server_dialog: LocalServerDialog | None = None
        self._documents_dialog: DocumentsDialog | None = None
        self._tools_dialog: ToolsDialog | None = None
        self._model_import: ModelImportDialog | None = None
        # Once closed, no new background work: the services may already be shutting down.
        self._closed = False
        read_only = services.core.damaged is not None

        self.setWindowTitle("Hearth")
        self.resize(1180, 760)
        self.statusLine = StatusLine(self.statusBar(), services)
        self.session = ChatSession(
            services.store,
            services.core.settings_store,
            services.chat,
            self._run,
            unsaved_edit=lambda: self.chatSettings.panel.has_unsaved_edit,
        )
        self._context = WindowContext(
            services,
            self.session,
            Dialogs(confirm, ask, ask_save, ask_open, ask_folder, ask_choice, ask_open_many),
            self._run,
            self.statusLine.show_info,
            self.statusLine.show_error,
            read_only=read_only,
            preload_model=preload_model and not read_only,
            is_closed=lambda: self._closed,
        )
        self.sidebar = Sidebar(self._context)
        self.chatArea = ChatArea(self._context, confirm_open, open_url)
        self.chatSettings = ChatSettings(self._context, self)
        self.chatFiles = ChatFiles(self._context, self)
        self.splitter = QSplitter(Qt.Orientation.Horizontal)
        self.splitter.addWidget(self.sidebar)
        self.splitter.addWidget(self.chatArea)
        self.splitter.addWidget(self.chatSettings.panel)
        self.splitter.setStretchFactor(1, 1)
        self.splitter.setSizes([250, 850, 300])
        self.splitter.setChildrenCollapsible(False)
        self.setCentralWidget(self.splitter)
        self.menus = MainMenus(self, services.settings.theme, services.settings.language)
        self._feed = SessionFeed(services.chat, self.session, self)
        self._name_parts()
        self._connect()
        self.retranslate()
        self._apply_theme()

        # Anything still in the trash was deleted in a session that ended before its undo bar expired.
        if not read_only:
            self.sidebar.purge_deleted()
        self.session.refresh_conversations()
        self._run(services.library.list_models, self.chatArea.modelBar.show_models)
        services.servers_service.refresh()
        services.documents_service.reload()
        self._run(services.chat.current_status, self.statusLine.show_model_status)
        self.chatSettings.refresh_presets()
        self._run(warm_up_highlighting, lambda _none: None)
        if services.gpu_monitor.latest is not None:
            self.statusLine.show_gpu(services.gpu_monitor.latest)
        self.composer.setFocus()

    def _name_parts(self) -> None:
        """The widgets tests, benchmarks and the smoke test drive, by the names they have always had."""
        sidebar, chat, bar, status, menus = (
            self.sidebar,
            self.chatArea,
            self.chatArea.modelBar,
            self.statusLine,
            self.menus,
        )
        self.newChatButton, self.searchButton = sidebar.newChatButton, sidebar.searchButton
        self.conversationList, self.searchPanel = sidebar.conversationList, sidebar.searchPanel
        self.renameButton, self.pinButton, self.deleteButton = (
            sidebar.renameButton,
            sidebar.pinButton,
            sidebar.deleteButton,
        )
        self.modelPicker, self.settingsButton = bar.modelPicker, bar.settingsButton
        self.transcript, self.composer, self.contextMeter = chat.transcript, chat.composer, chat.contextMeter
        self.sendButton, self.stopButton, self.editBanner = chat.sendButton, chat.stopButton, chat.editBanner
        self.undoBar, self.damagedBanner, self.damagedLabel = (
            chat.undoBar,
            chat.damagedBanner,
            chat.damagedLabel,
        )
        self.salvageButton, self.restoreButton = chat.salvageButton, chat.restoreButton
        self.settingsPanel = self.chatSettings.panel
        self.statusBackend, self.statusGpu, self.statusStats = (
            status.statusBackend,
            status.statusGpu,
            status.statusStats,
        )
        self.localServerIndicator = status.localServerIndicator
        self.fileMenu, self.themeMenu = menus.fileMenu, menus.themeMenu
        self.importAction, self.modelsAction = menus.importAction, menus.modelsAction
        self.exportMarkdownAction, self.exportJsonAction = menus.exportMarkdownAction, menus.exportJsonAction
        self.exportAllMarkdownAction = menus.exportAllMarkdownAction
        self.localServerAction, self.serversAction = menus.localServerAction, menus.serversAction
        self.documentsAction, self.collectionPicker = menus.documentsAction, chat.collectionPicker

    def _connect(self) -> None:
        sidebar, chat, bar, settings, files, menus = (
            self.sidebar,
            self.chatArea,
            self.chatArea.modelBar,
            self.chatSettings,
            self.chatFiles,
            self.menus,
        )
        sidebar.newChatRequested.connect(self.new_chat)
        sidebar.conversationPicked.connect(self.open_conversation)
        sidebar.hitOpened.connect(self._open_hit)
        sidebar.exportRequested.connect(files.export_conversation)
        sidebar.trashed.connect(chat.undoBar.show_deleted)
        sidebar.searchClosed.connect(self.composer.setFocus)
        chat.undoBar.undoRequested.connect(sidebar.undo_delete)
        chat.undoBar.expired.connect(sidebar.purge_deleted)

        chat.aboutToSend.connect(settings.panel.save_now)
        chat.transcript.copied.connect(lambda _text: self.statusLine.show_info(self.tr("Copied")))
        chat.contextMeter.policyClicked.connect(self._focus_policy)
        chat.salvageButton.clicked.connect(files.salvage_export)
        chat.restoreButton.clicked.connect(files.restore_from_backup)
        chat.collectionPicker.manageRequested.connect(self.open_documents)
        bar.listed.connect(self._models_listed)
        bar.prepared.connect(chat.schedule_measure)
        bar.picked.connect(settings.reload)
        bar.picked.connect(chat.schedule_measure)
        bar.settingsButton.toggled.connect(self._show_settings_panel)
        QShortcut(QKeySequence(Qt.Key.Key_Escape), self, self._escape)

        settings.contextChanged.connect(chat.schedule_measure)
        settings.panel.thinkingDisplayChanged.connect(chat.transcript.set_thinking_display)
        settings.panel.overflowPolicyChanged.connect(chat.contextMeter.set_policy)
        settings.panel.closeRequested.connect(lambda: bar.settingsButton.setChecked(False))
        files.openRequested.connect(self.open_conversation)
        files.restored.connect(chat.show_restored)

        menus.newChat.connect(self.new_chat)
        menus.importChats.connect(files.import_chats)
        menus.exportCurrent.connect(files.export_current)
        menus.exportAll.connect(files.export_all)
        menus.quit.connect(self.close)
        menus.find.connect(self.open_search)
        menus.toggleSettings.connect(self.toggle_settings)
        menus.openModels.connect(self.open_library)
        menus.openDocuments.connect(self.open_documents)
        menus.openLocalServer.connect(self.open_local_server)
        menus.openServers.connect(self.open_manage_servers)
        menus.openTools.connect(self.open_tools)
        self.chatArea.toolsPicker.manageRequested.connect(self.open_tools)
        self.chatArea.modelsDropped.connect(self.import_models)
        menus.themeChosen.connect(self.set_theme_choice)
        menus.languageChosen.connect(self.set_language)

        session = self.session
        session.conversations_listed.connect(self._show_conversations)
        session.reply_began.connect(lambda _began: self._update_controls())
        session.reply_finished.connect(self._reply_finished)
        session.reply_failed.connect(lambda _failed: self._update_controls())

        services = self._services
        services.chat.modelStatus.connect(self.statusLine.show_model_status)
        services.chat.busyChanged.connect(self._update_controls)
        services.gpu_monitor.status.connect(self.statusLine.show_gpu)
        # Indexing goes on with the panel closed (a folder watcher starts passes too): its errors show here.
        services.documents_service.failed.connect(self.statusLine.show_error)
        QGuiApplication.styleHints().colorSchemeChanged.connect(self._on_color_scheme)

    def retranslate(self) -> None:
        self.sidebar.retranslate()
        self.chatArea.retranslate()
        self.chatSettings.retranslate()
        self.menus.retranslate()
        self._update_controls()

    def changeEvent(self, event: QEvent) -> None:
        if event.type() == QEvent.Type.LanguageChange:
            self.retranslate()
        super().changeEvent(event)

    # -- state the tests and the smoke test look at ---------------------------------------------

    @property
    def current_conversation_id(self) -> int | None:
        return self.session.current_id

    @property
    def initial_load_done(self) -> bool:
        return (
            self.chatArea.modelBar.models_loaded
            and self._conversations_loaded
            and self.statusLine.status_known
        )

    @property
    def editing_message_id(self) -> int | None:
        return self.session.editing

    @property
    def theme(self) -> Theme:
        return self._theme

    @property
    def serverDialog(self) -> ServerDialog | None:
        return self.chatArea.modelBar.serverDialog

    @property
    def serversDialog(self) -> ServersDialog | None:
        return self.chatArea.modelBar.serversDialog

    def current_messages(self) -> list[Message]:
        return list(self.session.messages.values())

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
                self.statusLine.show_error(str(error))

        (self._services.network if network else self._services.background).call(fn, done, failed)

    # -- theme and language ---------------------------------------------------------------------

    def _apply_theme(self) -> None:
        theme = self._theme
        # The window's own style sheet and palette, not the application's: every window (and each test)
        # gets its theme without leaking into others.
        self.setStyleSheet(stylesheet(theme))
        self.setPalette(palette(theme))
        self.transcript.set_theme(theme)
        self.sidebar.set_theme(theme)
        self.contextMeter.set_theme(theme)
        self._show_conversations(list(self.session.conversations.values()), loaded=self._conversations_loaded)

    def set_theme_choice(self, choice: str) -> None:
        if choice != self._services.settings.theme:
            self._services.update_settings(theme=choice)
        self.menus.check_theme(choice)
        self._theme = resolve_theme(choice)
        self._apply_theme()

    def _on_color_scheme(self, scheme: Qt.ColorScheme) -> None:
        if self._services.settings.theme == "system":
            self._theme = resolve_theme("system", scheme)
            self._apply_theme()

    def set_language(self, choice: str) -> None:
        if choice != self._services.settings.language:
            self._services.update_settings(language=choice)
        self.menus.check_language(choice)
        # Installing a translator posts every widget a LanguageChange (retranslate() answers it); the
        # window does not wait for those to be delivered.
        self._translations.install(choice)
        self.retranslate()

    # -- conversations --------------------------------------------------------------------------

    def refresh_conversations(self) -> None:
        self.session.refresh_conversations()

    def _show_conversations(self, conversations: Sequence[Conversation], *, loaded: bool = True) -> None:
        self._conversations_loaded = self._conversations_loaded or loaded
        self.sidebar.show_conversations(conversations)
        self._update_controls()

    def new_chat(self) -> None:
        # An edit still waiting to be saved belongs to the chat being left.
        self.settingsPanel.save_now()
        self.session.new_chat()
        self.sidebar.select(None)
        self.chatArea.clear()
        self._update_controls()
        self.chatSettings.load(None)
        self.chatArea.schedule_measure()
        self.composer.setFocus()

    def open_conversation(self, conversation_id: int, focus_message: int | None = None) -> None:
        """Show a conversation; with `focus_message`, switch to the branch holding it and scroll to it."""
        if conversation_id != self.session.current_id:
            self.settingsPanel.save_now()
        self.session.open(conversation_id, focus_message)
        if focus_message is None:
            self.chatArea.clear()
        self._update_controls()

    def _open_hit(self, conversation_id: int, message_id: int | None, in_thinking: bool) -> None:
        self.chatArea.expect_thinking_hit(message_id if in_thinking else None)
        self.open_conversation(conversation_id, focus_message=message_id)

    def open_search(self) -> None:
        self.sidebar.open_search()

    def close_search(self) -> None:
        self.sidebar.close_search()

    def export_current(self, fmt: str) -> None:
        self.chatFiles.export_current(fmt)

    # -- panels and dialogs ---------------------------------------------------------------------

    def open_local_server(self) -> None:
        if self._local_server_dialog is None:
            self._local_server_dialog = LocalServerDialog(
                self._services,
                parent=self,
                confirm=self._context.dialogs.confirm,
                ask=self._context.dialogs.ask,
            )
        self._local_server_dialog.show()
        self._local_server_dialog.raise_()
        self._local_server_dialog.activateWindow()

    def open_library(self) -> None:
        if self._library_dialog is None:
            self._library_dialog = LibraryDialog(
                self._services, confirm=self._context.dialogs.confirm, parent=self
            )
        self._library_dialog.show()
        self._library_dialog.raise_()
        self._library_dialog.activateWindow()

    def import_models(self, paths: Sequence[Path]) -> ModelImportDialog | None:
        """GGUF files or folders dropped on the window: copied into the library, as the import window
        shows; one drop at a time."""
        if self._context.read_only:
            self.statusLine.show_error(
                self.tr("The library cannot take models while the database is read-only.")
            )
            return None
        if self._model_import is None:
            importer = ModelImporter(self._services.library, self)
            # Each drop ends with the picker and the library window listing what came in.
            importer.finished.connect(lambda _imported: self._services.library_service.refresh())
            self._model_import = ModelImportDialog(importer, self)
        dialog = self._model_import
        if dialog.busy:
            self.statusLine.show_error(
                self.tr("Models are still being imported; drop these again when it is done.")
            )
            return dialog
        dialog.start(paths)
        dialog.show()
        dialog.raise_()
        return dialog

    def open_documents(self) -> DocumentsDialog:
        if self._documents_dialog is None:
            self._documents_dialog = DocumentsDialog(
                self._services.documents_service,
                self._context.dialogs,
                read_only=self._context.read_only,
                parent=self,
            )
        self._documents_dialog.show()
        self._documents_dialog.raise_()
        self._documents_dialog.activateWindow()
        return self._documents_dialog

    def open_tools(self) -> ToolsDialog:
        if self._tools_dialog is None:
            host = self._services.chat.tool_host
            assert host is not None, "the window's chat service has a tool host"
            dialogs = self._context.dialogs
            self._tools_dialog = ToolsDialog(
                host.registry,
                host,
                self._context.run,
                confirm=dialogs.confirm,
                ask_open=dialogs.ask_open,
                parent=self,
            )
        self._tools_dialog.show()
        self._tools_dialog.raise_()
        self._tools_dialog.activateWindow()
        return self._tools_dialog

    def open_add_server(self) -> ServerDialog:
        return self.chatArea.modelBar.open_add_server()

    def open_manage_servers(self) -> ServersDialog:
        return self.chatArea.modelBar.open_manage_servers()

    def toggle_settings(self) -> None:
        self.settingsButton.setChecked(not self.settingsButton.isChecked())

    def _show_settings_panel(self, shown: bool) -> None:
        self.settingsPanel.setVisible(shown)
        self.menus.settingsAction.setChecked(shown)
        sizes = self.splitter.sizes()
        if shown and sizes[2] == 0:
            # Hidden when the splitter was first sized, the panel would open with no width at all.
            width = min(SETTINGS_PANEL_WIDTH, max(0, sizes[1] - 300))
            self.splitter.setSizes([sizes[0], sizes[1] - width, width])
        if shown:
            self.chatSettings.reload()

    def _focus_policy(self) -> None:
        self.settingsButton.setChecked(True)
        self.settingsPanel.overflowPolicy.setFocus()

    # -- models, replies and controls -----------------------------------------------------------

    def _models_listed(self, has_models: bool) -> None:
        self._update_controls()
        if has_models:
            self.chatSettings.reload()

    def _reply_finished(self, finished: ReplyFinished) -> None:
        self.statusLine.show_reply_stats(finished.stats)
        self._update_controls()

    def _escape(self) -> None:
        if self._services.chat.busy:
            self._services.chat.stop()
        elif self.session.editing is not None:
            self.session.cancel_edit()
        elif self.searchPanel.isVisible():
            self.close_search()

    def _update_controls(self, _busy: bool | None = None) -> None:
        self.chatArea.update_controls()
        self.sidebar.update_controls()
        self.menus.update_controls(
            writable=not self._context.read_only, has_chat=self.session.current_id is not None
        )

    def closeEvent(self, event: QCloseEvent) -> None:
        # A delete still waiting for its undo becomes final before the services stop.
        self.undoBar.expire_now()
        self._closed = True
        if self._model_import is not None:
            # A copy in progress stops at its next chunk, before the library's database closes.
            self._model_import.stop()
        if self._owns_translations:
            self._translations.remove()
        super().closeEvent(event)
