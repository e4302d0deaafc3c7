"""Manage servers…: the servers the user added, whether each answers and with how many models, where its
API key is kept, the context its models are planned for; remove one, change or remove its key, change its
CA bundle or context length, list its models again.

The work happens in app.qt.servers_service off the GUI thread; this dialog asks and shows the answers.
"""

from __future__ import annotations

import html
from collections.abc import Callable
from pathlib import Path

from PySide6.QtCore import QCoreApplication, QEvent, Qt, Signal
from PySide6.QtWidgets import (
    QComboBox,
    QDialog,
    QDialogButtonBox,
    QGridLayout,
    QHeaderView,
    QLineEdit,
    QTreeWidget,
    QTreeWidgetItem,
    QVBoxLayout,
    QWidget,
)

from app.errors import HearthError
from app.qt.servers_service import Removal, ServerEntry, ServersService
from app.remote.openai_client import is_loopback
from app.remote.registry import DEFAULT_SERVER_CONTEXT, Server, check_key_text, parse_context_tokens
from app.secret_store import SecretResult
from inference.protocol import ErrorKind
from ui.dialogs import AskOpenPath, ConfirmAction
from ui.library_widgets import plain_label, push_button
from ui.server_dialog import CA_FILES, context_edit

NAME, ADDRESS, STATE, KEY, CA, CONTEXT = range(6)


def plain_tooltip(text: str) -> str:
    """`text` as a tooltip that shows it as written. Qt renders a tooltip as HTML whenever it looks like
    HTML (Qt::mightBeRichText), and a server's error text, a server name or a file path is not Hearth's to
    format: `<img src=…>` in it would be fetched, `<b>` would be bold. Escaped inside a paragraph, it is
    always rich text that shows every character."""
    if not text:
        return ""
    return "<p>" + html.escape(text).replace("\n", "<br>") + "</p>"


def unavailable_text(kind: ErrorKind | None) -> str:
    """Why a server's models are missing, in a few words (the full reason goes in a tooltip)."""
    if kind is ErrorKind.SERVER_AUTH:
        return QCoreApplication.translate("ServersPanel", "API key refused")
    if kind is ErrorKind.SERVER_CERTIFICATE:
        return QCoreApplication.translate("ServersPanel", "certificate not trusted")
    if kind is ErrorKind.SERVER_TIMEOUT:
        return QCoreApplication.translate("ServersPanel", "not answering")
    if kind is None or kind is ErrorKind.SERVER_UNREACHABLE:
        return QCoreApplication.translate("ServersPanel", "not reachable")
    return QCoreApplication.translate("ServersPanel", "cannot list its models")


class ModelPicker(QComboBox):
    """The model picker, telling when it is opened: server lists that failed are tried again then."""

    opening = Signal()

    def showPopup(self) -> None:
        self.opening.emit()
        super().showPopup()


class KeyDialog(QDialog):
    """Asks for a server's new API key, hidden as it is typed."""

    entered = Signal(str)

    def __init__(self, server: Server, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("serverKeyDialog")
        self.setWindowTitle(self.tr("API key for {server}").format(server=server.name))
        self.keyEdit = QLineEdit()
        self.keyEdit.setObjectName("serverKeyEdit")
        self.keyEdit.setEchoMode(QLineEdit.EchoMode.Password)
        self.keyEdit.setPlaceholderText(self.tr("kept in the system keyring"))
        self.noteLabel = plain_label("serverKeyNote")
        if server.url.startswith("http:") and not is_loopback(server.url):
            self.noteLabel.setText(
                self.tr("The address is not https: the key and your chats travel unencrypted.")
            )
        self.buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Cancel)
        self.saveButton = self.buttons.addButton(self.tr("Save key"), QDialogButtonBox.ButtonRole.AcceptRole)
        self.saveButton.setObjectName("saveServerKey")
        self.saveButton.setDefault(True)
        self.saveButton.setEnabled(False)
        self.keyEdit.textChanged.connect(lambda text: self.saveButton.setEnabled(bool(text.strip())))
        self.buttons.accepted.connect(self._save)
        self.buttons.rejected.connect(self.reject)
        layout = QVBoxLayout(self)
        self.urlLabel = plain_label("serverKeyUrl")
        self.urlLabel.setText(self.tr("The new API key for {url}:").format(url=server.url))
        layout.addWidget(self.urlLabel)
        layout.addWidget(self.keyEdit)
        layout.addWidget(self.noteLabel)
        layout.addWidget(self.buttons)

    def _save(self) -> None:
        try:
            key = check_key_text(self.keyEdit.text())
        except HearthError as exc:
            self.noteLabel.setText(str(exc))
            return
        self.entered.emit(key)
        self.accept()


class ContextDialog(QDialog):
    """Asks for a server's context length; blank (or "auto") for what the server reports."""

    # The tokens, or None for automatic.
    entered = Signal(object)

    def __init__(self, server: Server, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("serverContextDialog")
        self.setWindowTitle(self.tr("Context of {server}").format(server=server.name))
        self.contextEdit = context_edit()
        if server.context_tokens is not None:
            self.contextEdit.setText(str(server.context_tokens))
        self.noteLabel = plain_label("serverContextNote")
        self.buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Cancel)
        self.saveButton = self.buttons.addButton(self.tr("Save"), QDialogButtonBox.ButtonRole.AcceptRole)
        self.saveButton.setObjectName("saveServerContext")
        self.saveButton.setDefault(True)
        self.buttons.accepted.connect(self._save)
        self.buttons.rejected.connect(self.reject)
        layout = QVBoxLayout(self)
        self.askLabel = plain_label("serverContextAsk")
        self.askLabel.setText(
            self.tr(
                "Tokens of prompt and reply together for the models of {server} (blank: automatic):"
            ).format(server=server.name)
        )
        layout.addWidget(self.askLabel)
        layout.addWidget(self.contextEdit)
        layout.addWidget(self.noteLabel)
        layout.addWidget(self.buttons)

    def _save(self) -> None:
        try:
            tokens = parse_context_tokens(self.contextEdit.text())
        except HearthError as exc:
            self.noteLabel.setText(str(exc))
            return
        self.entered.emit(tokens)
        self.accept()


class ServersDialog(QDialog):
    # Asked to add a server: the window opens Add server…
    addRequested = Signal()

    def __init__(
        self,
        service: ServersService,
        parent: QWidget | None = None,
        *,
        confirm: ConfirmAction,
        ask_open: AskOpenPath,
    ) -> None:
        super().__init__(parent)
        self.setObjectName("serversDialog")
        self._service = service
        self._confirm = confirm
        self._ask_open = ask_open
        # A change was asked for and its answer is not in yet: the change buttons wait for it.
        self._pending = False
        self.keyDialog: KeyDialog | None = None
        self.contextDialog: ContextDialog | None = None
        self.resize(760, 360)

        self.serverList = QTreeWidget()
        self.serverList.setObjectName("serverList")
        self.serverList.setRootIsDecorated(False)
        self.serverList.setUniformRowHeights(True)
        self.serverList.header().setSectionResizeMode(QHeaderView.ResizeMode.ResizeToContents)
        self.serverList.header().setStretchLastSection(True)
        self.emptyLabel = plain_label("noServers")
        self.detailLabel = plain_label("serverDetail")
        self.detailLabel.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.statusLabel = plain_label("serversStatus")
        self.refreshButton = push_button("refreshServers")
        self.changeKeyButton = push_button("changeServerKey")
        self.removeKeyButton = push_button("removeServerKey")
        self.changeCaButton = push_button("changeServerCa")
        self.systemCaButton = push_button("systemServerCa")
        self.changeContextButton = push_button("changeServerContext")
        self.removeButton = push_button("removeServer")
        self.addButton = push_button("addServer")
        actions = QGridLayout()
        for index, button in enumerate(
            (
                self.refreshButton,
                self.changeKeyButton,
                self.removeKeyButton,
                self.addButton,
                self.changeCaButton,
                self.systemCaButton,
                self.changeContextButton,
                self.removeButton,
            )
        ):
            actions.addWidget(button, index // 4, index % 4)
        self.buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Close)
        self.buttons.rejected.connect(self.reject)
        layout = QVBoxLayout(self)
        layout.addWidget(self.serverList, 1)
        layout.addWidget(self.emptyLabel)
        layout.addWidget(self.detailLabel)
        layout.addLayout(actions)
        layout.addWidget(self.statusLabel)
        layout.addWidget(self.buttons)

        self.serverList.itemSelectionChanged.connect(self._show_selected)
        self.refreshButton.clicked.connect(self.refresh)
        self.changeKeyButton.clicked.connect(self.change_key)
        self.removeKeyButton.clicked.connect(self.remove_key)
        self.changeCaButton.clicked.connect(self.change_ca_bundle)
        self.systemCaButton.clicked.connect(self.use_system_cas)
        self.changeContextButton.clicked.connect(self.change_context)
        self.removeButton.clicked.connect(self.remove)
        self.addButton.clicked.connect(self.addRequested)
        service.changed.connect(self._show_entries)
        service.removed.connect(self._on_removed)
        service.keyChanged.connect(self._on_key_changed)
        service.caChanged.connect(self._on_ca_changed)
        service.contextChanged.connect(self._on_context_changed)
        service.failed.connect(self._on_failed)
        self.retranslate()

    def retranslate(self) -> None:
        self.setWindowTitle(self.tr("Servers"))
        self.serverList.setHeaderLabels(
            [
                self.tr("Name"),
                self.tr("Address"),
                self.tr("Models"),
                self.tr("API key"),
                self.tr("CA bundle"),
                self.tr("Context"),
            ]
        )
        self.emptyLabel.setText(self.tr("No servers yet: add one that speaks the OpenAI API."))
        self.refreshButton.setText(self.tr("&Refresh models"))
        self.refreshButton.setToolTip(self.tr("Ask every server for its models again"))
        self.changeKeyButton.setText(self.tr("Change &key…"))
        self.removeKeyButton.setText(self.tr("Remove k&ey"))
        self.changeCaButton.setText(self.tr("Change &CA bundle…"))
        self.systemCaButton.setText(self.tr("Use the &system's CAs"))
        self.changeContextButton.setText(self.tr("Change con&text…"))
        self.changeContextButton.setToolTip(
            self.tr(
                "The context length its models are planned for, when the server does not say or says wrong"
            )
        )
        self.removeButton.setText(self.tr("Re&move…"))
        self.addButton.setText(self.tr("&Add server…"))
        self._show_entries()

    def changeEvent(self, event: QEvent) -> None:
        if event.type() == QEvent.Type.LanguageChange:
            self.retranslate()
        super().changeEvent(event)

    # -- what is shown -------------------------------------------------------------------------------

    def selected(self) -> ServerEntry | None:
        items = self.serverList.selectedItems()
        if not items:
            return None
        name = items[0].data(NAME, Qt.ItemDataRole.UserRole)
        return next((e for e in self._service.entries() if e.server.name == name), None)

    def _show_entries(self) -> None:
        entries = self._service.entries()
        current = self.selected()
        chosen = current.server.name if current is not None else None
        view = self.serverList
        view.blockSignals(True)
        view.clear()
        for entry in entries:
            item = QTreeWidgetItem(
                [entry.server.name, entry.server.url, self._state_text(entry), self._key_text(entry), "", ""]
            )
            item.setData(NAME, Qt.ItemDataRole.UserRole, entry.server.name)
            if entry.error is not None:
                item.setToolTip(STATE, plain_tooltip(entry.error))
            bundle = entry.server.ca_bundle
            item.setText(CA, Path(bundle).name if bundle else self.tr("System"))
            item.setToolTip(CA, plain_tooltip(bundle or self.tr("The system's certificate authorities")))
            text, why = self._context_text(entry)
            item.setText(CONTEXT, text)
            item.setToolTip(CONTEXT, why)
            view.addTopLevelItem(item)
            if entry.server.name == chosen or (chosen is None and view.topLevelItemCount() == 1):
                item.setSelected(True)
        view.blockSignals(False)
        view.setVisible(bool(entries))
        self.emptyLabel.setVisible(not entries)
        self._show_selected()

    def _state_text(self, entry: ServerEntry) -> str:
        if entry.checking:
            return self.tr("Checking…")
        if entry.error is not None:
            text = unavailable_text(entry.error_kind)
            return text[:1].upper() + text[1:]
        if entry.models is None:
            return ""
        return str(len(entry.models))

    def _context_text(self, entry: ServerEntry) -> tuple[str, str]:
        """The context the server's models are planned for, and where the figure comes from."""
        setting = entry.server.context_tokens
        if setting is not None:
            return f"{setting:,}", self.tr("Set for this server")
        reported = {m.context_tokens for m in entry.models or () if m.context_tokens is not None}
        if len(reported) == 1:
            return f"{next(iter(reported)):,}", self.tr("What the server reports")
        if reported:
            return self.tr("Per model"), self.tr("What the server reports for each model")
        default = f"{DEFAULT_SERVER_CONTEXT:,}"
        return default, self.tr("The server does not report its context length: {tokens} is assumed").format(
            tokens=default
        )

    def _key_text(self, entry: ServerEntry) -> str:
        key = entry.key
        if key is None:
            return self.tr("…")
        if not key.present:
            return self.tr("None") if key.persisted else self.tr("Unknown")
        return self.tr("Keyring") if key.persisted else self.tr("This session only")

    def _show_selected(self) -> None:
        entry = self.selected()
        lines = []
        if entry is not None:
            if entry.error is not None:
                lines.append(entry.error)
            key = entry.key
            if key is not None and key.present and key.persisted:
                lines.append(
                    self.tr("The API key is kept in the system keyring ({backend}).").format(
                        backend=key.backend
                    )
                )
            elif key is not None and key.present:
                lines.append(
                    self.tr("The API key is kept for this session only: {reason}").format(reason=key.reason)
                )
            elif key is not None and not key.persisted:
                lines.append(key.reason)
        self.detailLabel.setText("\n".join(lines))
        self._update_buttons()

    def _update_buttons(self) -> None:
        entry = self.selected()
        ready = entry is not None and not self._pending
        has_key = entry is not None and entry.key is not None and entry.key.present
        for button in (
            self.changeKeyButton,
            self.changeCaButton,
            self.changeContextButton,
            self.removeButton,
        ):
            button.setEnabled(ready)
        self.removeKeyButton.setEnabled(ready and has_key)
        self.systemCaButton.setEnabled(ready and entry is not None and entry.server.ca_bundle is not None)

    # -- what the user asks for ----------------------------------------------------------------------

    def refresh(self) -> None:
        self.statusLabel.clear()
        self._service.refresh()

    def change_key(self) -> None:
        entry = self.selected()
        if entry is None:
            return
        dialog = KeyDialog(entry.server, self)
        dialog.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)
        name = entry.server.name
        dialog.entered.connect(lambda key: self._change(lambda: self._service.set_key(name, key)))
        self.keyDialog = dialog
        dialog.open()

    def remove_key(self) -> None:
        entry = self.selected()
        if entry is None:
            return
        question = self.tr(
            "Remove the API key for “{server}” from the system keyring? Hearth then calls it without a key."
        ).format(server=entry.server.name)
        if self._confirm(self, self.tr("Remove key"), question, self.tr("Remove key")):
            name = entry.server.name
            self._change(lambda: self._service.set_key(name, None))

    def change_ca_bundle(self) -> None:
        entry = self.selected()
        if entry is None:
            return
        chosen = self._ask_open(
            self, self.tr("CA bundle for {server}").format(server=entry.server.name), CA_FILES
        )
        if chosen is not None:
            name = entry.server.name
            self._change(lambda: self._service.set_ca_bundle(name, chosen))

    def use_system_cas(self) -> None:
        entry = self.selected()
        if entry is not None:
            name = entry.server.name
            self._change(lambda: self._service.set_ca_bundle(name, None))

    def change_context(self) -> None:
        entry = self.selected()
        if entry is None:
            return
        dialog = ContextDialog(entry.server, self)
        dialog.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)
        name = entry.server.name
        dialog.entered.connect(lambda tokens: self._change(lambda: self._service.set_context(name, tokens)))
        self.contextDialog = dialog
        dialog.open()

    def remove(self) -> None:
        entry = self.selected()
        if entry is None:
            return
        question = self.tr(
            "Remove the server “{server}” and its API key? Chats with its models keep their replies and "
            "still say which server wrote them."
        ).format(server=entry.server.name)
        if self._confirm(self, self.tr("Remove server"), question, self.tr("Remove")):
            name = entry.server.name
            self._change(lambda: self._service.remove(name))

    def _change(self, ask: Callable[[], None]) -> None:
        self._pending = True
        self.statusLabel.setText(self.tr("Saving…"))
        self._update_buttons()
        ask()

    # -- the answers ---------------------------------------------------------------------------------

    def _done(self, message: str) -> None:
        self._pending = False
        self.statusLabel.setText(message)
        self._update_buttons()

    def _on_removed(self, removal: Removal) -> None:
        name = removal.server.name
        if removal.key.persisted:
            self._done(self.tr("Removed {server} and its API key.").format(server=name))
        else:
            self._done(
                self.tr("Removed {server}, but not its API key: {reason}").format(
                    server=name, reason=removal.key.reason
                )
            )

    def _on_key_changed(self, name: str, result: SecretResult) -> None:
        if result.value is None and result.persisted:
            self._done(self.tr("Removed the API key for {server}.").format(server=name))
        elif result.value is None:
            self._done(
                self.tr("The API key for {server} could not be removed: {reason}").format(
                    server=name, reason=result.reason
                )
            )
        elif result.persisted:
            self._done(
                self.tr("Saved the new API key for {server} in the system keyring.").format(server=name)
            )
        else:
            self._done(
                self.tr("Using the new API key for {server} for this session only: {reason}").format(
                    server=name, reason=result.reason
                )
            )

    def _on_ca_changed(self, server: Server) -> None:
        if server.ca_bundle is None:
            self._done(self.tr("{server} is checked against the system's CAs.").format(server=server.name))
        else:
            self._done(
                self.tr("{server} is checked against the CAs in {path}.").format(
                    server=server.name, path=server.ca_bundle
                )
            )

    def _on_context_changed(self, server: Server) -> None:
        if server.context_tokens is None:
            self._done(
                self.tr(
                    "{server}'s models are planned for the context it reports, else {tokens} tokens."
                ).format(server=server.name, tokens=f"{DEFAULT_SERVER_CONTEXT:,}")
            )
        else:
            self._done(
                self.tr("{server}'s models are planned for {tokens} tokens.").format(
                    server=server.name, tokens=f"{server.context_tokens:,}"
                )
            )

    def _on_failed(self, message: str) -> None:
        self._done(message)
