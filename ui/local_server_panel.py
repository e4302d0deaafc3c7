"""The local API server's controls (a switch, the port, the address, the key) and its status-bar indicator.

The service does the work on its own thread: binding the port and the keyring can both take a while, and
the window must not wait for either.
"""

from __future__ import annotations

from PySide6.QtCore import QEvent, Qt
from PySide6.QtGui import QGuiApplication
from PySide6.QtWidgets import (
    QCheckBox,
    QDialog,
    QDialogButtonBox,
    QFormLayout,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QSpinBox,
    QVBoxLayout,
    QWidget,
)

from app.qt.local_api_service import ServerState
from app.qt.services import AppServices
from app.secret_store import SecretResult
from ui.library_widgets import plain_label, push_button


def _address(port: int) -> str:
    return f"http://127.0.0.1:{port}/v1"


class LocalServerPanel(QWidget):
    def __init__(self, services: AppServices, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("localServerPanel")
        self._services = services
        self._server = services.local_server
        # The user turned the switch on and the answer is not in yet: a failure turns the setting off too.
        self._starting = False

        self.intro = plain_label("localServerIntro")
        self.switch = QCheckBox()
        self.switch.setObjectName("localServerSwitch")
        self.portLabel = QLabel()
        self.portSpin = QSpinBox()
        self.portSpin.setObjectName("localServerPort")
        self.portSpin.setRange(1, 65535)
        self.portSpin.setValue(services.settings.local_server_port)
        self.portLabel.setBuddy(self.portSpin)
        self.urlLabel = QLabel()
        self.urlCaption = QLabel()
        self.urlLabel.setObjectName("localServerUrl")
        self.urlLabel.setTextFormat(Qt.TextFormat.PlainText)
        self.urlLabel.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.keyLabel = QLabel()
        self.keyEdit = QLineEdit()
        self.keyEdit.setObjectName("localServerKey")
        self.keyEdit.setReadOnly(True)
        self.keyEdit.setEchoMode(QLineEdit.EchoMode.Password)
        self.keyLabel.setBuddy(self.keyEdit)
        self.showKeyButton = push_button("showLocalServerKey")
        self.showKeyButton.setCheckable(True)
        self.copyKeyButton = push_button("copyLocalServerKey")
        self.newKeyButton = push_button("newLocalServerKey")
        self.keyNote = plain_label("localServerKeyNote")
        self.statusLabel = plain_label("localServerStatus")

        key_row = QHBoxLayout()
        key_row.addWidget(self.keyEdit, 1)
        key_row.addWidget(self.showKeyButton)
        key_row.addWidget(self.copyKeyButton)
        key_row.addWidget(self.newKeyButton)
        form = QFormLayout()
        form.addRow(self.portLabel, self.portSpin)
        form.addRow(self.urlCaption, self.urlLabel)
        form.addRow(self.keyLabel, key_row)
        form.addRow(self.keyNote)
        layout = QVBoxLayout(self)
        layout.addWidget(self.intro)
        layout.addWidget(self.switch)
        layout.addLayout(form)
        layout.addWidget(self.statusLabel)
        layout.addStretch(1)

        self.switch.toggled.connect(self._on_switch)
        self.portSpin.valueChanged.connect(lambda _port: self._show_state())
        self.showKeyButton.toggled.connect(self._show_key)
        self.copyKeyButton.clicked.connect(self.copy_key)
        self.newKeyButton.clicked.connect(self.new_key)
        self._server.stateChanged.connect(self._on_state)
        self._server.keyChanged.connect(self._on_key)
        self._server.activityChanged.connect(lambda _active: self._show_state())
        self.retranslate()
        # Connected first, then read: a change signalled in between is not missed.
        self._set_switch(self._server.state.running)
        if self._server.key is not None:
            self._on_key(self._server.key)
        else:
            self._server.load_key()

    def retranslate(self) -> None:
        self.intro.setText(
            self.tr(
                "Programs on this computer can use the model loaded in Hearth through an OpenAI-compatible "
                "API, with the key below. Other computers cannot reach it. Requests take turns with your "
                "chats."
            )
        )
        self.switch.setText(self.tr("&Serve the loaded model on 127.0.0.1"))
        self.portLabel.setText(self.tr("&Port"))
        self.urlCaption.setText(self.tr("Address"))
        self.keyLabel.setText(self.tr("API &key"))
        self.showKeyButton.setText(self.tr("Show"))
        self.copyKeyButton.setText(self.tr("Copy"))
        self.newKeyButton.setText(self.tr("New key"))
        self.newKeyButton.setToolTip(self.tr("Make a new key; programs using the old one must be given it"))
        self._show_state()

    def copy_key(self) -> None:
        if self.keyEdit.text():
            QGuiApplication.clipboard().setText(self.keyEdit.text())
            self.keyNote.setText(self.tr("The key was copied."))

    def new_key(self) -> None:
        self.keyNote.setText(self.tr("Making a new key…"))
        self._server.new_key()

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

    def _on_key(self, key: SecretResult) -> None:
        self.keyEdit.setText(key.value or "")
        if key.persisted:
            self.keyNote.setText(self.tr("The key is kept in the system keyring."))
        else:
            self.keyNote.setText(
                self.tr(
                    "Session only: the system keyring cannot keep the key, so it changes at the next start."
                )
            )

    def _show_key(self, shown: bool) -> None:
        self.keyEdit.setEchoMode(QLineEdit.EchoMode.Normal if shown else QLineEdit.EchoMode.Password)
        self.showKeyButton.setText(self.tr("Hide") if shown else self.tr("Show"))

    def changeEvent(self, event: QEvent) -> None:
        if event.type() == QEvent.Type.LanguageChange:
            self.retranslate()
        super().changeEvent(event)


class LocalServerDialog(QDialog):
    def __init__(self, services: AppServices, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("localServerDialog")
        self.panel = LocalServerPanel(services)
        buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Close)
        buttons.rejected.connect(self.reject)
        layout = QVBoxLayout(self)
        layout.addWidget(self.panel)
        layout.addWidget(buttons)
        self.resize(560, 320)
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
