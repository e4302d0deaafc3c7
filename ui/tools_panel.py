"""View → Tools…: the MCP servers in mcp.json, each with its state, its tools and its last error; add one (a
command Hearth starts, or a Streamable HTTP address, with the environment variables or headers it needs),
import those LM Studio, Claude Desktop or Cursor know, turn one off or on, remove it.

The values of environment variables and headers are secrets (API keys, tokens): typed into a hidden field,
kept in the keyring, never shown again. Whatever touches the keyring or starts a server runs off the GUI
thread."""

from __future__ import annotations

import shlex
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from PySide6.QtCore import QEvent, Qt
from PySide6.QtGui import QAction
from PySide6.QtWidgets import (
    QDialog,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QMenu,
    QPushButton,
    QToolButton,
    QTreeWidget,
    QTreeWidgetItem,
    QVBoxLayout,
    QWidget,
)

from app.errors import HearthError
from app.secret_store import SecretResult
from app.tools.config import (
    HttpTransport,
    StdioTransport,
    ToolServer,
    ToolServerRegistry,
    other_apps_files,
    parse_pairs,
)
from app.tools.host import ToolHost, ToolInfo, ToolServerError
from ui.dialogs import AskOpenPath, ConfirmAction
from ui.window_context import RunInWindow

NAME, STATE, DETAIL = range(3)
# The other apps whose MCP servers can be imported, in the order the menu lists them.
OTHER_APPS = (("lmstudio", "LM Studio"), ("claude", "Claude Desktop"), ("cursor", "Cursor"))
MCP_FILES = "JSON (*.json);;All files (*)"


@dataclass(frozen=True)
class _Saved:
    """What a change off the GUI thread did: what to tell the user, and whether a server was added."""

    message: str
    added: bool = False


def _session_only(results: Sequence[SecretResult]) -> SecretResult | None:
    """The first secret the keyring would not keep (it lives in this session's memory only)."""
    return next((result for result in results if not result.persisted), None)


class ToolsDialog(QDialog):
    def __init__(
        self,
        registry: ToolServerRegistry,
        host: ToolHost,
        run: RunInWindow,
        *,
        confirm: ConfirmAction,
        ask_open: AskOpenPath,
        parent: QWidget | None = None,
    ) -> None:
        super().__init__(parent)
        self.setObjectName("toolsDialog")
        self.resize(760, 520)
        self._registry = registry
        self._host = host
        self._run = run
        self._confirm = confirm
        self._ask_open = ask_open
        # The environment variables or headers the server being added gets: names shown, values never.
        self._secrets: dict[str, str] = {}
        # What the last check found: a server's tools, or why it could not be used.
        self._found: dict[str, list[ToolInfo] | str] = {}
        self.serverTree = QTreeWidget()
        self.serverTree.setObjectName("toolServerTree")
        self.serverTree.setColumnCount(3)
        self.serverTree.itemSelectionChanged.connect(self._selection_changed)
        self.nameEdit = QLineEdit()
        self.nameEdit.setObjectName("toolServerName")
        self.targetEdit = QLineEdit()
        self.targetEdit.setObjectName("toolServerTarget")
        self.addButton = QPushButton()
        self.addButton.setObjectName("addToolServerButton")
        self.addButton.clicked.connect(self.add_server)
        self.secretNameEdit = QLineEdit()
        self.secretNameEdit.setObjectName("toolSecretName")
        self.secretValueEdit = QLineEdit()
        self.secretValueEdit.setObjectName("toolSecretValue")
        self.secretValueEdit.setEchoMode(QLineEdit.EchoMode.Password)
        self.secretValueEdit.returnPressed.connect(self.add_secret)
        self.addSecretButton = QPushButton()
        self.addSecretButton.setObjectName("addToolSecretButton")
        self.addSecretButton.clicked.connect(self.add_secret)
        self.clearSecretsButton = QPushButton()
        self.clearSecretsButton.setObjectName("clearToolSecretsButton")
        self.clearSecretsButton.clicked.connect(self.clear_secrets)
        self.secretsLabel = QLabel()
        self.secretsLabel.setObjectName("toolSecrets")
        self.secretsLabel.setTextFormat(Qt.TextFormat.PlainText)
        self.secretsLabel.setWordWrap(True)
        self.importButton = QToolButton()
        self.importButton.setObjectName("importToolServersButton")
        self.importButton.setPopupMode(QToolButton.ToolButtonPopupMode.InstantPopup)
        self.importMenu = QMenu(self.importButton)
        self.importMenu.setObjectName("importToolServersMenu")
        self.importMenu.aboutToShow.connect(self.fill_import_menu)
        self.importButton.setMenu(self.importMenu)
        self.toggleButton = QPushButton()
        self.toggleButton.setObjectName("toggleToolServerButton")
        self.toggleButton.clicked.connect(self.toggle_selected)
        self.removeButton = QPushButton()
        self.removeButton.setObjectName("removeToolServerButton")
        self.removeButton.clicked.connect(self.remove_selected)
        self.checkButton = QPushButton()
        self.checkButton.setObjectName("checkToolServersButton")
        self.checkButton.clicked.connect(self.check)
        self.statusLabel = QLabel()
        self.statusLabel.setObjectName("toolsStatus")
        self.statusLabel.setWordWrap(True)
        self.statusLabel.setTextFormat(Qt.TextFormat.PlainText)
        add_row = QHBoxLayout()
        add_row.addWidget(self.nameEdit, 1)
        add_row.addWidget(self.targetEdit, 3)
        add_row.addWidget(self.addButton)
        secret_row = QHBoxLayout()
        secret_row.addWidget(self.secretNameEdit, 1)
        secret_row.addWidget(self.secretValueEdit, 2)
        secret_row.addWidget(self.addSecretButton)
        secret_row.addWidget(self.clearSecretsButton)
        buttons = QHBoxLayout()
        buttons.addWidget(self.checkButton)
        buttons.addWidget(self.importButton)
        buttons.addStretch(1)
        buttons.addWidget(self.toggleButton)
        buttons.addWidget(self.removeButton)
        layout = QVBoxLayout(self)
        layout.addWidget(self.serverTree, 1)
        layout.addLayout(buttons)
        layout.addLayout(add_row)
        layout.addLayout(secret_row)
        layout.addWidget(self.secretsLabel)
        layout.addWidget(self.statusLabel)
        self.retranslate()

    # -- what the user does ------------------------------------------------------------------------

    def add_secret(self) -> None:
        """An environment variable (for a command) or a header (for an address) the next server added gets;
        the same name again replaces its value."""
        name, value = self.secretNameEdit.text().strip(), self.secretValueEdit.text()
        try:
            self._secrets.update(parse_pairs([f"{name}={value}"], self.tr("variable or header")))
        except HearthError as exc:
            self.statusLabel.setText(str(exc))
            return
        self.secretNameEdit.clear()
        self.secretValueEdit.clear()
        self.statusLabel.setText("")
        self._show_secrets()

    def clear_secrets(self) -> None:
        self._secrets = {}
        self._show_secrets()

    def add_server(self) -> None:
        name, target = self.nameEdit.text().strip(), self.targetEdit.text().strip()
        try:
            if target.casefold().startswith(("http://", "https://")):
                transport: StdioTransport | HttpTransport = HttpTransport(target)
            else:
                words = shlex.split(target)
                if not words:
                    raise HearthError(self.tr("Give the command that starts the server, or its address."))
                transport = StdioTransport(words[0], tuple(words[1:]))
        except (HearthError, ValueError) as exc:
            self.statusLabel.setText(str(exc))
            return
        secrets = dict(self._secrets)
        # Phrased here: the worker thread does not translate.
        added = self.tr("Added {name}.")
        session_only = self.tr("Added {name}; its secrets are kept for this session only: {reason}")

        def save() -> _Saved:
            try:
                server, results = self._registry.add(name, transport, secrets)
            except HearthError as exc:
                return _Saved(str(exc))
            refused = _session_only(results)
            if refused is not None:
                return _Saved(session_only.format(name=server.name, reason=refused.reason), added=True)
            return _Saved(added.format(name=server.name), added=True)

        self._save(save)

    def import_from(self, path: Path) -> None:
        """The servers another app's file lists; a name Hearth has already is kept, and said."""
        added_some = self.tr("Imported {names}.")
        none_added = self.tr("No servers were imported from {path}.")
        skipped_one = self.tr("Skipped {name}: {why}")
        session_only = self.tr("Their secrets are kept for this session only: {reason}")

        def save() -> _Saved:
            try:
                result = self._registry.import_file(path)
            except HearthError as exc:
                return _Saved(str(exc))
            lines = [added_some.format(names=", ".join(result.added))] if result.added else []
            lines += [skipped_one.format(name=name, why=why) for name, why in result.skipped]
            if not result.added:
                lines.insert(0, none_added.format(path=path))
            refused = _session_only(result.secrets)
            if refused is not None:
                lines.append(session_only.format(reason=refused.reason))
            return _Saved("\n".join(lines), added=bool(result.added))

        self._save(save)

    def toggle_selected(self) -> None:
        server = self._selected()
        if server is None:
            return

        def save() -> _Saved:
            # Writing mcp.json may move a value typed into it by hand into the keyring.
            try:
                self._registry.set_enabled(server.name, not server.enabled)
            except HearthError as exc:
                return _Saved(str(exc))
            if server.enabled:
                self._host.stop(server.name)
            return _Saved("")

        self._save(save)

    def remove_selected(self) -> None:
        server = self._selected()
        if server is None:
            return
        question = self.tr(
            "Remove the tool server “{name}” and the secrets kept for it in the keyring? Chats that used its "
            "tools keep their calls and results."
        ).format(name=server.name)
        if not self._confirm(self, self.tr("Remove tool server"), question, self.tr("Remove")):
            return
        removed = self.tr("Removed {name}.").format(name=server.name)

        def save() -> _Saved:
            self._host.stop(server.name)
            try:
                self._registry.remove(server.name)
            except HearthError as exc:
                return _Saved(str(exc))
            return _Saved(removed)

        self._found.pop(server.name, None)
        self._save(save)

    def _save(self, change: Callable[[], _Saved]) -> None:
        """Blocking work (the keyring, stopping a server) on the worker; the dialog waits for it."""
        self._set_busy(True)
        self.statusLabel.setText(self.tr("Saving…"))
        self._run(change, self._saved)

    def _saved(self, saved: _Saved) -> None:
        self._set_busy(False)
        self.statusLabel.setText(saved.message)
        if saved.added:
            self.nameEdit.clear()
            self.targetEdit.clear()
            self.clear_secrets()
        self.refresh()
        if saved.added:
            self.check()

    def _set_busy(self, busy: bool) -> None:
        for button in (self.addButton, self.importButton, self.removeButton, self.toggleButton):
            button.setEnabled(not busy)
        if not busy:
            self._selection_changed()

    def fill_import_menu(self) -> None:
        """The other apps whose files are on this computer, then any file: looked up as the menu opens."""
        self.importMenu.clear()
        found = other_apps_files()
        for key, label in OTHER_APPS:
            path = found.get(key)
            action = QAction(label, self.importMenu)
            action.setObjectName(f"import_{key}")
            action.setEnabled(path is not None and path.is_file())
            if path is not None:
                action.setToolTip(str(path))
                action.triggered.connect(lambda _checked=False, path=path: self.import_from(path))
            self.importMenu.addAction(action)
        self.importMenu.addSeparator()
        other = QAction(self.tr("Another file…"), self.importMenu)
        other.setObjectName("import_file")
        other.triggered.connect(self._import_chosen_file)
        self.importMenu.addAction(other)

    def _import_chosen_file(self) -> None:
        path = self._ask_open(self, self.tr("Import MCP servers"), MCP_FILES)
        if path is not None:
            self.import_from(path)

    def check(self) -> None:
        """Start the servers that are on and list their tools, off the GUI thread."""
        servers = [s.name for s in self._registry.servers() if s.enabled]
        self.checkButton.setEnabled(False)
        # What the dialog said before (a server just added, say) is said again once the servers answered.
        said = self.statusLabel.text()
        self.statusLabel.setText(self.tr("Starting the tool servers…"))

        def work() -> dict[str, list[ToolInfo] | str]:
            found: dict[str, list[ToolInfo] | str] = {}
            for name in servers:
                try:
                    found[name] = self._host.tools(name)
                except ToolServerError as exc:
                    found[name] = str(exc)
            return found

        self._run(work, lambda found: self._checked(found, said), network=True)

    def _checked(self, found: dict[str, list[ToolInfo] | str], said: str) -> None:
        self._found.update(found)
        self.checkButton.setEnabled(True)
        self.statusLabel.setText(said)
        self.refresh()

    # -- the list ----------------------------------------------------------------------------------

    def refresh(self) -> None:
        selected = self._selected()
        self.serverTree.clear()
        for server in self._registry.servers():
            item = QTreeWidgetItem([server.name, self._state(server), self._detail(server)])
            item.setData(NAME, Qt.ItemDataRole.UserRole, server.name)
            found = self._found.get(server.name)
            if isinstance(found, list) and server.enabled:
                for tool in found:
                    first = tool.description.strip().splitlines()[0] if tool.description.strip() else ""
                    item.addChild(QTreeWidgetItem([tool.name, "", first]))
            self.serverTree.addTopLevelItem(item)
            item.setExpanded(True)
            if selected is not None and selected.name == server.name:
                item.setSelected(True)
        # Tool names are what the user looks for: never elided.
        self.serverTree.resizeColumnToContents(NAME)
        self.serverTree.resizeColumnToContents(STATE)
        self._selection_changed()

    def _state(self, server: ToolServer) -> str:
        if not server.enabled:
            return self.tr("Off")
        found = self._found.get(server.name)
        if found is None:
            return self.tr("Not started")
        if isinstance(found, str):
            return self.tr("Failed")
        return self.tr("{count} tools").format(count=len(found))

    def _detail(self, server: ToolServer) -> str:
        found = self._found.get(server.name)
        if isinstance(found, str) and server.enabled:
            return found
        if isinstance(server.transport, HttpTransport):
            return server.transport.url
        return shlex.join([server.transport.command, *server.transport.args])

    def _show_secrets(self) -> None:
        if not self._secrets:
            self.secretsLabel.setText(self.tr("No environment variables or headers for the next server."))
            self.clearSecretsButton.setEnabled(False)
            return
        self.secretsLabel.setText(
            self.tr("The next server gets {names} (values kept in the keyring).").format(
                names=", ".join(self._secrets)
            )
        )
        self.clearSecretsButton.setEnabled(True)

    def _selected(self) -> ToolServer | None:
        items = self.serverTree.selectedItems()
        item = items[0] if items else None
        while item is not None and item.parent() is not None:
            item = item.parent()
        name = item.data(NAME, Qt.ItemDataRole.UserRole) if item is not None else None
        return next((s for s in self._registry.servers() if s.name == name), None)

    def _selection_changed(self) -> None:
        server = self._selected()
        self.toggleButton.setEnabled(server is not None)
        self.removeButton.setEnabled(server is not None)
        self.toggleButton.setText(
            self.tr("Turn on") if server is not None and not server.enabled else self.tr("Turn off")
        )

    def retranslate(self) -> None:
        self.setWindowTitle(self.tr("Tool servers (MCP)"))
        self.serverTree.setHeaderLabels([self.tr("Server or tool"), self.tr("State"), self.tr("Details")])
        self.nameEdit.setPlaceholderText(self.tr("Name"))
        self.targetEdit.setPlaceholderText(
            self.tr("Command that starts it (npx -y …, uvx …), or its https:// address")
        )
        self.addButton.setText(self.tr("Add"))
        self.secretNameEdit.setPlaceholderText(self.tr("Variable or header name (API_KEY, Authorization)"))
        self.secretValueEdit.setPlaceholderText(self.tr("Its value (hidden, kept in the keyring)"))
        self.addSecretButton.setText(self.tr("Add variable"))
        self.addSecretButton.setToolTip(
            self.tr(
                "An environment variable for a command, or a header for an address, for the next server added"
            )
        )
        self.clearSecretsButton.setText(self.tr("Clear"))
        self.importButton.setText(self.tr("Import"))
        self.importButton.setToolTip(self.tr("Add the MCP servers another app knows"))
        self._show_secrets()
        self.removeButton.setText(self.tr("Remove"))
        self.checkButton.setText(self.tr("Start and list tools"))
        self.checkButton.setToolTip(self.tr("Start the servers that are on and ask each for its tools"))
        self._selection_changed()
        self.refresh()

    def changeEvent(self, event: QEvent) -> None:
        if event.type() == QEvent.Type.LanguageChange:
            self.retranslate()
        super().changeEvent(event)
