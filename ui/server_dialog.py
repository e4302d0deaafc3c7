"""Add server…: a name, the API address, an optional API key, CA bundle and context length. The connection
is tried (the server's model list) off the GUI thread, and the server is saved only when that works."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import shiboken6
from PySide6.QtCore import QCoreApplication, Qt, Signal
from PySide6.QtWidgets import (
    QDialog,
    QDialogButtonBox,
    QFormLayout,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QPushButton,
    QVBoxLayout,
    QWidget,
)

from app.errors import HearthError
from app.qt.background import Background
from app.remote.openai_client import ServerModel
from app.remote.registry import DEFAULT_SERVER_CONTEXT, Server, ServerRegistry, parse_context_tokens
from app.secret_store import SecretResult
from ui.dialogs import AskOpenPath, ask_open_path

CA_FILES = "PEM (*.pem *.crt *.cer);;All files (*)"


@dataclass(frozen=True)
class ServerAdded:
    server: Server
    models: tuple[ServerModel, ...]
    key_note: str  # why the key is kept for this session only; empty when it is in the keyring or absent


class ServerDialog(QDialog):
    # A ServerAdded, once the server answered and was saved.
    added = Signal(object)

    def __init__(
        self,
        registry: ServerRegistry,
        network: Background,
        parent: QWidget | None = None,
        *,
        ask_open: AskOpenPath = ask_open_path,
    ) -> None:
        super().__init__(parent)
        self.setObjectName("serverDialog")
        self._registry = registry
        self._network = network
        self._ask_open = ask_open
        self._busy = False
        self.setWindowTitle(self.tr("Add server"))

        self.nameEdit = QLineEdit()
        self.nameEdit.setObjectName("serverName")
        self.nameEdit.setPlaceholderText(self.tr("e.g. gpu-box"))
        self.urlEdit = QLineEdit()
        self.urlEdit.setObjectName("serverUrl")
        self.urlEdit.setPlaceholderText("http://gpu-box:8000/v1")
        self.keyEdit = QLineEdit()
        self.keyEdit.setObjectName("serverKey")
        self.keyEdit.setEchoMode(QLineEdit.EchoMode.Password)
        self.keyEdit.setPlaceholderText(self.tr("optional; kept in the system keyring"))
        self.caEdit = QLineEdit()
        self.caEdit.setObjectName("serverCaBundle")
        self.caEdit.setPlaceholderText(self.tr("optional, for an internal server's certificate"))
        self.chooseCaButton = QPushButton(self.tr("Choose…"))
        self.chooseCaButton.setObjectName("chooseCaBundle")
        self.chooseCaButton.clicked.connect(self._choose_ca)
        ca_row = QHBoxLayout()
        ca_row.addWidget(self.caEdit, 1)
        ca_row.addWidget(self.chooseCaButton)
        self.contextEdit = context_edit()

        self.statusLabel = QLabel()
        self.statusLabel.setObjectName("serverStatus")
        # Server errors quote what the server said: never let a label parse it as HTML.
        self.statusLabel.setTextFormat(Qt.TextFormat.PlainText)
        self.statusLabel.setWordWrap(True)

        form = QFormLayout()
        form.addRow(self.tr("Name"), self.nameEdit)
        form.addRow(self.tr("Address"), self.urlEdit)
        form.addRow(self.tr("API key"), self.keyEdit)
        form.addRow(self.tr("CA bundle"), ca_row)
        form.addRow(self.tr("Context"), self.contextEdit)
        self.buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Cancel)
        self.saveButton = self.buttons.addButton(
            self.tr("Connect and save"), QDialogButtonBox.ButtonRole.AcceptRole
        )
        self.saveButton.setObjectName("saveServer")
        self.saveButton.setDefault(True)
        self.buttons.accepted.connect(self.connect_and_save)
        self.buttons.rejected.connect(self.reject)
        layout = QVBoxLayout(self)
        layout.addWidget(
            QLabel(self.tr("A server that speaks the OpenAI API: vLLM, TGI, llama.cpp, Ollama…"))
        )
        layout.addLayout(form)
        layout.addWidget(self.statusLabel)
        layout.addWidget(self.buttons)

    @property
    def busy(self) -> bool:
        return self._busy

    def _choose_ca(self) -> None:
        chosen = self._ask_open(self, self.tr("CA bundle"), CA_FILES)
        if chosen is not None:
            self.caEdit.setText(str(chosen))

    def connect_and_save(self) -> None:
        if self._busy:
            return
        name, url = self.nameEdit.text(), self.urlEdit.text()
        key = self.keyEdit.text() or None
        ca = Path(self.caEdit.text().strip()) if self.caEdit.text().strip() else None
        try:
            context = parse_context_tokens(self.contextEdit.text())
        except HearthError as exc:
            self.statusLabel.setText(str(exc))
            return
        registry = self._registry
        self._set_busy(True)
        self.statusLabel.setText(self.tr("Connecting to {url}…").format(url=url.strip()))

        def work() -> tuple[Server, list[ServerModel], SecretResult | None]:
            return registry.connect(name, url, api_key=key, ca_bundle=ca, context_tokens=context)

        self._network.call(work, self._connected, self._failed, operation="connecting to a new server")

    def _connected(self, result: tuple[Server, list[ServerModel], SecretResult | None]) -> None:
        if not shiboken6.isValid(self):
            return
        server, models, stored = result
        self._set_busy(False)
        note = stored.reason if stored is not None and not stored.persisted else ""
        self.added.emit(ServerAdded(server, tuple(models), note))
        self.accept()

    def _failed(self, error: Exception) -> None:
        if not shiboken6.isValid(self):
            return
        self._set_busy(False)
        self.statusLabel.setText(str(error))

    def _set_busy(self, busy: bool) -> None:
        self._busy = busy
        self.saveButton.setEnabled(not busy)
        for edit in (self.nameEdit, self.urlEdit, self.keyEdit, self.caEdit, self.contextEdit):
            edit.setReadOnly(busy)


def context_edit() -> QLineEdit:
    """Where a server's context length is typed: blank for what the server reports."""
    edit = QLineEdit()
    edit.setObjectName("serverContext")
    edit.setPlaceholderText(
        QCoreApplication.translate(
            "ServerDialog", "automatic: what the server reports, else {tokens}"
        ).format(tokens=f"{DEFAULT_SERVER_CONTEXT:,}")
    )
    edit.setToolTip(
        QCoreApplication.translate(
            "ServerDialog",
            "The tokens of prompt and reply together that the server's models take. Attached documents are "
            "planned to fit in it: whole when they fit, searched passages when not.",
        )
    )
    return edit
