"""The local API server's controls (a switch, the port, the address, the keys) and its status-bar indicator.

The service does the work on its own thread: binding the port and the keyring can both take a while, and
the window must not wait for either.
"""

from __future__ import annotations

import time

from PySide6.QtCore import QEvent, Qt, QTimer
from PySide6.QtGui import QGuiApplication, QHideEvent, QShowEvent
from PySide6.QtWidgets import (
    QCheckBox,
    QDialog,
    QDialogButtonBox,
    QFormLayout,
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QLineEdit,
    QSpinBox,
    QTreeWidget,
    QTreeWidgetItem,
    QVBoxLayout,
    QWidget,
)

from app.local_api.api_keys import ApiKeyInfo, CreatedKey
from app.qt.local_api_service import KeyListing, ServerState
from app.qt.services import AppServices
from app.secret_store import SecretResult
from app.settings import MAX_PARALLEL_SLOTS
from ui.dialogs import AskText, ConfirmAction, ask_text, confirm_action
from ui.library_widgets import plain_label, push_button

# While the panel is open, the list is read again this often: last uses, and keys made or revoked by
# `hearth api-keys`, show without a click.
KEYS_REFRESH_MS = 5000
_NAME_ROLE = Qt.ItemDataRole.UserRole


def _address(port: int) -> str:
    return f"http://127.0.0.1:{port}/v1"


def _when(timestamp: int) -> str:
    return time.strftime("%Y-%m-%d %H:%M", time.localtime(timestamp))


class LocalServerPanel(QWidget):
    def __init__(
        self,
        services: AppServices,
        parent: QWidget | None = None,
        *,
        confirm: ConfirmAction = confirm_action,
        ask: AskText = ask_text,
    ) -> None:
        super().__init__(parent)
        self.setObjectName("localServerPanel")
        self._services = services
        self._server = services.local_server
        self._confirm = confirm
        self._ask = ask
        # The user turned the switch on and the answer is not in yet: a failure turns the setting off too.
        self._starting = False
        # A key is being made or revoked: the key buttons wait for the answer.
        self._key_pending = False
        self._shown_key: CreatedKey | None = None

        self.intro = plain_label("localServerIntro")
        self.switch = QCheckBox()
        self.switch.setObjectName("localServerSwitch")
        self.portLabel = QLabel()
        self.portSpin = QSpinBox()
        self.portSpin.setObjectName("localServerPort")
        self.portSpin.setRange(1, 65535)
        self.portSpin.setValue(services.settings.local_server_port)
        self.portLabel.setBuddy(self.portSpin)
        self.parallelLabel = QLabel()
        self.parallelSpin = QSpinBox()
        self.parallelSpin.setObjectName("parallelReplies")
        self.parallelSpin.setRange(1, MAX_PARALLEL_SLOTS)
        self.parallelSpin.setValue(services.settings.parallel_slots)
        self.parallelLabel.setBuddy(self.parallelSpin)
        self.urlLabel = QLabel()
        self.urlCaption = QLabel()
        self.urlLabel.setObjectName("localServerUrl")
        self.urlLabel.setTextFormat(Qt.TextFormat.PlainText)
        self.urlLabel.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.keysCaption = plain_label("localServerKeysCaption")
        self.keyList = QTreeWidget()
        self.keyList.setObjectName("localServerKeys")
        self.keyList.setRootIsDecorated(False)
        self.keyList.setUniformRowHeights(True)
        self.keyList.header().setSectionResizeMode(QHeaderView.ResizeMode.ResizeToContents)
        self.keyList.header().setStretchLastSection(True)
        self.keysCaption.setBuddy(self.keyList)
        self.noKeysLabel = plain_label("localServerNoKeys")
        self.keysProblem = plain_label("localServerKeysProblem")
        self.createKeyButton = push_button("createLocalServerKey")
        self.revokeKeyButton = push_button("revokeLocalServerKey")
        # A key just made: shown here once, to copy, and gone when the panel closes.
        self.newKeyBox = QWidget()
        self.newKeyBox.setObjectName("localServerNewKey")
        self.newKeyCaption = plain_label("localServerNewKeyCaption")
        self.newKeyEdit = QLineEdit()
        self.newKeyEdit.setObjectName("localServerNewKeyValue")
        self.newKeyEdit.setReadOnly(True)
        self.copyKeyButton = push_button("copyLocalServerKey")
        self.doneKeyButton = push_button("doneLocalServerKey")
        self.keyNote = plain_label("localServerKeyNote")
        self.statusLabel = plain_label("localServerStatus")

        new_key_row = QHBoxLayout()
        new_key_row.addWidget(self.newKeyEdit, 1)
        new_key_row.addWidget(self.copyKeyButton)
        new_key_row.addWidget(self.doneKeyButton)
        new_key_layout = QVBoxLayout(self.newKeyBox)
        new_key_layout.setContentsMargins(0, 0, 0, 0)
        new_key_layout.addWidget(self.newKeyCaption)
        new_key_layout.addLayout(new_key_row)
        self.newKeyBox.hide()
        key_buttons = QHBoxLayout()
        key_buttons.addWidget(self.createKeyButton)
        key_buttons.addWidget(self.revokeKeyButton)
        key_buttons.addStretch(1)
        form = QFormLayout()
        form.addRow(self.portLabel, self.portSpin)
        form.addRow(self.urlCaption, self.urlLabel)
        form.addRow(self.parallelLabel, self.parallelSpin)
        layout = QVBoxLayout(self)
        layout.addWidget(self.intro)
        layout.addWidget(self.switch)
        layout.addLayout(form)
        layout.addWidget(self.keysCaption)
        layout.addWidget(self.keyList, 1)
        layout.addWidget(self.noKeysLabel)
        layout.addWidget(self.keysProblem)
        layout.addLayout(key_buttons)
        layout.addWidget(self.newKeyBox)
        layout.addWidget(self.keyNote)
        layout.addWidget(self.statusLabel)

        self._refresh = QTimer(self)
        self._refresh.setInterval(KEYS_REFRESH_MS)
        self._refresh.timeout.connect(self._server.load_keys)
        self.switch.toggled.connect(self._on_switch)
        self.portSpin.valueChanged.connect(lambda _port: self._show_state())
        self.parallelSpin.valueChanged.connect(lambda n: self._services.update_settings(parallel_slots=n))
        self.keyList.itemSelectionChanged.connect(self._enable_key_buttons)
        self.createKeyButton.clicked.connect(self.create_key)
        self.revokeKeyButton.clicked.connect(self.revoke_key)
        self.copyKeyButton.clicked.connect(self.copy_key)
        self.doneKeyButton.clicked.connect(self.forget_shown_key)
        self._server.stateChanged.connect(self._on_state)
        self._server.keysChanged.connect(self._on_keys)
        self._server.keyCreated.connect(self._on_created)
        self._server.keyRevoked.connect(self._on_revoked)
        self._server.keyFailed.connect(self._on_key_failed)
        self._server.activityChanged.connect(lambda _active: self._show_state())
        self.retranslate()
        # Connected first, then read: a change signalled in between is not missed.
        self._set_switch(self._server.state.running)
        if self._server.listing is not None:
            self._on_keys(self._server.listing)
        self._server.load_keys()
        self._enable_key_buttons()

    def retranslate(self) -> None:
        self.intro.setText(
            self.tr(
                "Programs on this computer can use the model loaded in Hearth through an OpenAI-compatible "
                "API, each with a key of its own. Other computers cannot reach it. Several requests are "
                "answered at once, and your chats never wait for them."
            )
        )
        self.switch.setText(self.tr("&Serve the loaded model on 127.0.0.1"))
        self.portLabel.setText(self.tr("&Port"))
        self.urlCaption.setText(self.tr("Address"))
        self.parallelLabel.setText(self.tr("&Replies at once"))
        self.parallelSpin.setToolTip(
            self.tr(
                "How many requests from programs the model answers together; more wait their turn. This "
                "window's chats never wait for them. All share the context's memory. A change loads the "
                "model again at the next reply."
            )
        )
        self.keysCaption.setText(self.tr("API &keys"))
        self.keyList.setHeaderLabels(
            [self.tr("Name"), self.tr("Key"), self.tr("Created"), self.tr("Last used")]
        )
        self.noKeysLabel.setText(self.tr("No keys yet: make one for each program that will use the API."))
        self.createKeyButton.setText(self.tr("&Create key…"))
        self.createKeyButton.setToolTip(self.tr("Make a key for a program; it is shown once, to copy"))
        self.revokeKeyButton.setText(self.tr("&Revoke…"))
        self.revokeKeyButton.setToolTip(self.tr("Refuse the selected key from now on"))
        self.copyKeyButton.setText(self.tr("Copy"))
        self.doneKeyButton.setText(self.tr("Done"))
        self.doneKeyButton.setToolTip(self.tr("Hide the key; it cannot be shown again"))
        if self._shown_key is not None:
            self._show_created(self._shown_key)
        if self._server.listing is not None:
            self._on_keys(self._server.listing)
        self._show_state()

    # -- the keys -------------------------------------------------------------------------------------

    def selected_key(self) -> str | None:
        items = self.keyList.selectedItems()
        name = items[0].data(0, _NAME_ROLE) if items else None
        return name if isinstance(name, str) else None

    def create_key(self) -> None:
        name = self._ask(
            self,
            self.tr("Create API key"),
            self.tr(
                "A name for the program that will use the key (letters, digits, dots, dashes, underscores):"
            ),
            "",
        )
        if name is None or not name.strip():
            return
        self.keyNote.setText(self.tr("Making the key…"))
        self._set_key_pending(True)
        self._server.create_key(name.strip())

    def revoke_key(self) -> None:
        name = self.selected_key()
        listing = self._server.listing
        key = next((k for k in listing.keys if k.name == name), None) if listing is not None else None
        if key is None:
            return
        question = self.tr(
            "Programs using the key “{name}” ({prefix}…) will be refused from their next request, and it "
            "cannot be brought back. Revoke it?"
        ).format(name=key.name, prefix=key.prefix)
        if not self._confirm(self, self.tr("Revoke API key"), question, self.tr("Revoke")):
            return
        self.keyNote.setText(self.tr("Revoking the key…"))
        self._set_key_pending(True)
        self._server.revoke_key(key.name)

    def copy_key(self) -> None:
        if self.newKeyEdit.text():
            QGuiApplication.clipboard().setText(self.newKeyEdit.text())
            self.keyNote.setText(self.tr("The key was copied."))

    def forget_shown_key(self) -> None:
        """The new key leaves the screen (and this panel's memory) for good."""
        self._shown_key = None
        self.newKeyEdit.clear()
        self.newKeyBox.hide()

    def _on_created(self, created: CreatedKey) -> None:
        self._set_key_pending(False)
        self._shown_key = created
        self._show_created(created)
        self.newKeyEdit.setFocus()
        self.newKeyEdit.selectAll()

    def _show_created(self, created: CreatedKey) -> None:
        self.newKeyCaption.setText(
            self.tr("The new key “{name}”: copy it now, it is not shown again.").format(
                name=created.info.name
            )
        )
        self.newKeyEdit.setText(created.secret)
        self.newKeyBox.show()
        if created.reason:
            self.keyNote.setText(
                self.tr(
                    "Session only: the system keyring cannot keep this key, so it stops working when Hearth "
                    "closes. ({reason})"
                ).format(reason=created.reason)
            )
        else:
            self.keyNote.setText(self.tr("The key is kept in the system keyring."))

    def _on_revoked(self, revoked: tuple[ApiKeyInfo, SecretResult]) -> None:
        info, deleted = revoked
        self._set_key_pending(False)
        if self._shown_key is not None and self._shown_key.info.id == info.id:
            self.forget_shown_key()
        text = self.tr("Revoked “{name}”: no server accepts it any more.").format(name=info.name)
        if not deleted.persisted:
            text += " " + self.tr("Its secret is still in the system keyring: {reason}").format(
                reason=deleted.reason
            )
        self.keyNote.setText(text)

    def _on_key_failed(self, message: str) -> None:
        self._set_key_pending(False)
        self.keyNote.setText(message)

    def _on_keys(self, listing: KeyListing) -> None:
        selected = self.selected_key()
        self.keyList.blockSignals(True)
        self.keyList.clear()
        for key in listing.keys:
            name = key.name if key.persisted else self.tr("{name} (this session only)").format(name=key.name)
            used = _when(key.last_used_at) if key.last_used_at is not None else self.tr("Never")
            item = QTreeWidgetItem([name, f"{key.prefix}…", _when(key.created_at), used])
            item.setData(0, _NAME_ROLE, key.name)
            self.keyList.addTopLevelItem(item)
            if key.name == selected:
                item.setSelected(True)
        self.keyList.blockSignals(False)
        self.noKeysLabel.setVisible(not listing.keys)
        problem = ""
        if listing.unavailable:
            names = ", ".join(name for name, _why in listing.unavailable)
            problem = self.tr(
                "Refused for now, because the system keyring did not give their secrets: {names} ({reason})"
            ).format(names=names, reason=listing.unavailable[0][1])
        self.keysProblem.setText(problem)
        self.keysProblem.setVisible(bool(problem))
        self._enable_key_buttons()

    def _set_key_pending(self, pending: bool) -> None:
        self._key_pending = pending
        self._enable_key_buttons()

    def _enable_key_buttons(self) -> None:
        self.createKeyButton.setEnabled(not self._key_pending)
        self.revokeKeyButton.setEnabled(not self._key_pending and self.selected_key() is not None)

    def showEvent(self, event: QShowEvent) -> None:
        super().showEvent(event)
        self._server.load_keys()
        self._refresh.start()

    def hideEvent(self, event: QHideEvent) -> None:
        # A key is shown once: closing the window is the user being done with it.
        self._refresh.stop()
        self.forget_shown_key()
        super().hideEvent(event)

    # -- the server -----------------------------------------------------------------------------------

    def _on_switch(self, on: bool) -> None:
        if on:
            port = self.portSpin.value()
            self._starting = True
            self._services.update_settings(local_server_enabled=True, local_server_port=port)
            self._server.start(port)
        else:
            self._starting = False
            self._services.update_settings(local_server_enabled=False)
            self._server.stop()
        self.portSpin.setEnabled(not on)
        self._show_state()

    def _on_state(self, state: ServerState) -> None:
        if not state.running and state.error and self._starting:
            # It could not start: the switch goes back off, and so does the setting.
            self._services.update_settings(local_server_enabled=False)
        self._starting = False
        self._set_switch(state.running)
        self._show_state()

    def _set_switch(self, on: bool) -> None:
        self.switch.blockSignals(True)
        self.switch.setChecked(on)
        self.switch.blockSignals(False)
        self.portSpin.setEnabled(not on)

    def _show_state(self) -> None:
        state = self._server.state
        self.urlLabel.setText(state.url or _address(self.portSpin.value()))
        if self._starting:
            text = self.tr("Starting…")
        elif state.running:
            active = self._server.active_requests
            text = (
                self.tr("On: answering %n request(s).", "", active)
                if active
                else self.tr("On: waiting for requests.")
            )
        elif state.error:
            text = self.tr("Off: {error}").format(error=state.error)
        else:
            text = self.tr("Off.")
        self.statusLabel.setText(text)

    def changeEvent(self, event: QEvent) -> None:
        if event.type() == QEvent.Type.LanguageChange:
            self.retranslate()
        super().changeEvent(event)


class LocalServerDialog(QDialog):
    def __init__(
        self,
        services: AppServices,
        parent: QWidget | None = None,
        *,
        confirm: ConfirmAction = confirm_action,
        ask: AskText = ask_text,
    ) -> None:
        super().__init__(parent)
        self.setObjectName("localServerDialog")
        self.panel = LocalServerPanel(services, confirm=confirm, ask=ask)
        buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Close)
        buttons.rejected.connect(self.reject)
        layout = QVBoxLayout(self)
        layout.addWidget(self.panel)
        layout.addWidget(buttons)
        self.resize(640, 480)
        self.retranslate()

    def retranslate(self) -> None:
        self.setWindowTitle(self.tr("Local API server"))

    def changeEvent(self, event: QEvent) -> None:
        if event.type() == QEvent.Type.LanguageChange:
            self.retranslate()
        super().changeEvent(event)


class LocalServerIndicator(QLabel):
    """In the status bar while the server is on: idle, or busy answering requests (which then wait for the
    runner with the window's own replies)."""

    def __init__(self, services: AppServices, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("localServerIndicator")
        self.setTextFormat(Qt.TextFormat.PlainText)
        self._server = services.local_server
        self._busy = False
        self._server.stateChanged.connect(lambda _state: self.refresh())
        self._server.activityChanged.connect(lambda _active: self.refresh())
        self.refresh()

    @property
    def busy(self) -> bool:
        """Whether it shows the server as busy."""
        return self._busy

    def refresh(self) -> None:
        state = self._server.state
        self._busy = state.running and self._server.active_requests > 0
        self.setVisible(state.running or bool(state.error))
        if state.running:
            active = self._server.active_requests
            self.setText(self.tr("API busy (%n)", "", active) if active else self.tr("API on"))
            self.setToolTip(state.url or "")
        else:
            self.setText(self.tr("API server off"))
            self.setToolTip(state.error)
        font = self.font()
        font.setBold(self.busy)
        self.setFont(font)

    def changeEvent(self, event: QEvent) -> None:
        if event.type() == QEvent.Type.LanguageChange:
            self.refresh()
        super().changeEvent(event)
