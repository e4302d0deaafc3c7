"""View → Tools…: the MCP servers in mcp.json, each with its state, its tools and its last error; add one (a
command Hearth starts, or a Streamable HTTP address), turn it off or on, remove it. Starting the servers to
list their tools runs off the GUI thread. Environment values and headers (secrets) are given with
`hearth tools add`, which keeps them in the keyring."""

from __future__ import annotations

import shlex

from PySide6.QtCore import QEvent, Qt
from PySide6.QtWidgets import (
    QDialog,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QPushButton,
    QTreeWidget,
    QTreeWidgetItem,
    QVBoxLayout,
    QWidget,
)

from app.errors import HearthError
from app.tools.config import HttpTransport, StdioTransport, ToolServer, ToolServerRegistry
from app.tools.host import ToolHost, ToolInfo, ToolServerError
from ui.window_context import RunInWindow

NAME, STATE, DETAIL = range(3)


class ToolsDialog(QDialog):
    def __init__(
        self, registry: ToolServerRegistry, host: ToolHost, run: RunInWindow, parent: QWidget | None = None
    ) -> None:
        super().__init__(parent)
        self.setObjectName("toolsDialog")
        self.resize(760, 480)
        self._registry = registry
        self._host = host
        self._run = run
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
        buttons = QHBoxLayout()
        buttons.addWidget(self.checkButton)
        buttons.addStretch(1)
        buttons.addWidget(self.toggleButton)
        buttons.addWidget(self.removeButton)
        layout = QVBoxLayout(self)
        layout.addWidget(self.serverTree, 1)
        layout.addLayout(buttons)
        layout.addLayout(add_row)
        layout.addWidget(self.statusLabel)
        self.retranslate()

    # -- what the user does ------------------------------------------------------------------------

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
            server, _ = self._registry.add(name, transport)
        except (HearthError, ValueError) as exc:
            self.statusLabel.setText(str(exc))
            return
        self.nameEdit.clear()
        self.targetEdit.clear()
        self.statusLabel.setText(self.tr("Added {name}.").format(name=server.name))
        self.refresh()
        self.check()

    def toggle_selected(self) -> None:
        server = self._selected()
        if server is not None:
            self._registry.set_enabled(server.name, not server.enabled)
            if server.enabled:
                self._run(lambda: self._host.stop(server.name), lambda _none: None)
            self.refresh()

    def remove_selected(self) -> None:
        server = self._selected()
        if server is None:
            return
        self._run(lambda: self._host.stop(server.name), lambda _none: None)
        self._registry.remove(server.name)
        self._found.pop(server.name, None)
        self.statusLabel.setText(self.tr("Removed {name}.").format(name=server.name))
        self.refresh()

    def check(self) -> None:
        """Start the servers that are on and list their tools, off the GUI thread."""
        servers = [s.name for s in self._registry.servers() if s.enabled]
        self.checkButton.setEnabled(False)
        self.statusLabel.setText(self.tr("Starting the tool servers…"))

        def work() -> dict[str, list[ToolInfo] | str]:
            found: dict[str, list[ToolInfo] | str] = {}
            for name in servers:
                try:
                    found[name] = self._host.tools(name)
                except ToolServerError as exc:
                    found[name] = str(exc)
            return found

        self._run(work, self._checked, network=True)

    def _checked(self, found: dict[str, list[ToolInfo] | str]) -> None:
        self._found.update(found)
        self.checkButton.setEnabled(True)
        self.statusLabel.setText("")
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
        self.removeButton.setText(self.tr("Remove"))
        self.checkButton.setText(self.tr("Start and list tools"))
        self.checkButton.setToolTip(self.tr("Start the servers that are on and ask each for its tools"))
        self._selection_changed()
        self.refresh()

    def changeEvent(self, event: QEvent) -> None:
        if event.type() == QEvent.Type.LanguageChange:
            self.retranslate()
        super().changeEvent(event)
