"""The main window's menu bar: File, Edit and View. Each action is a signal; the window connects them."""

from __future__ import annotations

from collections.abc import Callable

from PySide6.QtCore import QObject, Signal
from PySide6.QtGui import QAction, QActionGroup, QKeySequence
from PySide6.QtWidgets import QMainWindow, QMenu

from ui.i18n import LANGUAGES
from ui.theme import THEME_CHOICES


class MainMenus(QObject):
    newChat = Signal()
    importChats = Signal()
    # "md" or "json"
    exportCurrent = Signal(str)
    exportAll = Signal(str)
    quit = Signal()
    find = Signal()
    toggleSettings = Signal()
    openModels = Signal()
    openDocuments = Signal()
    openLocalServer = Signal()
    openServers = Signal()
    openTools = Signal()
    themeChosen = Signal(str)
    languageChosen = Signal(str)

    def __init__(self, window: QMainWindow, theme: str, language: str) -> None:
        super().__init__(window)
        self._window = window
        bar = window.menuBar()
        self.fileMenu = bar.addMenu("")
        self.newChatAction = self._action(
            self.fileMenu, "newChatAction", self.newChat.emit, QKeySequence.StandardKey.New
        )
        self.importAction = self._action(
            self.fileMenu, "importAction", self.importChats.emit, QKeySequence.StandardKey.Open
        )
        self.fileMenu.addSeparator()
        self.exportMarkdownAction = self._action(
            self.fileMenu, "exportMarkdownAction", lambda: self.exportCurrent.emit("md")
        )
        self.exportJsonAction = self._action(
            self.fileMenu, "exportJsonAction", lambda: self.exportCurrent.emit("json")
        )
        self.exportAllMarkdownAction = self._action(
            self.fileMenu, "exportAllMarkdownAction", lambda: self.exportAll.emit("md")
        )
        self.exportAllJsonAction = self._action(
            self.fileMenu, "exportAllJsonAction", lambda: self.exportAll.emit("json")
        )
        self.fileMenu.addSeparator()
        self.quitAction = self._action(
            self.fileMenu, "quitAction", self.quit.emit, QKeySequence.StandardKey.Quit
        )

        self.editMenu = bar.addMenu("")
        self.findAction = self._action(
            self.editMenu, "findAction", self.find.emit, QKeySequence.StandardKey.Find
        )

        self.viewMenu = bar.addMenu("")
        self.settingsAction = self._action(
            self.viewMenu, "settingsAction", self.toggleSettings.emit, QKeySequence("Ctrl+,")
        )
        self.settingsAction.setCheckable(True)
        self.modelsAction = self._action(
            self.viewMenu, "modelsAction", self.openModels.emit, QKeySequence("Ctrl+Shift+M")
        )
        self.documentsAction = self._action(
            self.viewMenu, "documentsAction", self.openDocuments.emit, QKeySequence("Ctrl+Shift+D")
        )
        self.localServerAction = self._action(self.viewMenu, "localServerAction", self.openLocalServer.emit)
        self.serversAction = self._action(self.viewMenu, "serversAction", self.openServers.emit)
        self.toolsAction = self._action(self.viewMenu, "toolsAction", self.openTools.emit)
        self.themeMenu = self.viewMenu.addMenu("")
        self._theme_actions: dict[str, QAction] = {}
        themes = QActionGroup(self)
        for choice in THEME_CHOICES:
            action = self.themeMenu.addAction("")
            action.setCheckable(True)
            action.setData(choice)
            action.setChecked(choice == theme)
            action.triggered.connect(lambda _checked=False, c=choice: self.themeChosen.emit(c))
            themes.addAction(action)
            self._theme_actions[choice] = action
        self.languageMenu = self.viewMenu.addMenu("")
        self._language_actions: dict[str, QAction] = {}
        languages = QActionGroup(self)
        for choice in LANGUAGES:
            action = self.languageMenu.addAction("")
            action.setCheckable(True)
            action.setChecked(choice == language)
            action.triggered.connect(lambda _checked=False, c=choice: self.languageChosen.emit(c))
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
            self._window.addAction(action)
        return action

    def retranslate(self) -> None:
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
        self.documentsAction.setText(self.tr("&Documents…"))
        self.localServerAction.setText(self.tr("Local API &server…"))
        self.serversAction.setText(self.tr("Se&rvers…"))
        self.toolsAction.setText(self.tr("T&ools…"))
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

    def check_theme(self, choice: str) -> None:
        self._theme_actions[choice].setChecked(True)

    def check_language(self, choice: str) -> None:
        self._language_actions[choice].setChecked(True)

    def update_controls(self, *, writable: bool, has_chat: bool) -> None:
        for action in (self.newChatAction, self.importAction, self.documentsAction):
            action.setEnabled(writable)
        self.exportMarkdownAction.setEnabled(has_chat)
        self.exportJsonAction.setEnabled(has_chat)
