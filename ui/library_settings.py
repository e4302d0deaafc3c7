"""The "Models & Hub" settings page: the Hugging Face token, the Hub endpoint (a mirror) and whether the
library checks the Hub for model updates once a day.

The token goes straight to the library service, which stores it in the OS keyring on a worker thread: a
keyring that hangs never freezes the window, and when none can take the token it is kept for this session
only and the page says why. The field is emptied as soon as the token is handed over, and the page never
shows it again.
"""

from __future__ import annotations

from PySide6.QtCore import QEvent
from PySide6.QtWidgets import (
    QCheckBox,
    QFormLayout,
    QGroupBox,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QVBoxLayout,
    QWidget,
)

from app.errors import HearthError
from app.library.hub import resolve_endpoint
from app.qt.services import AppServices
from app.secret_store import SecretStatus
from ui.library_widgets import plain_label, push_button


class HubSettingsPage(QWidget):
    def __init__(self, services: AppServices, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("hubSettingsPage")
        self._services = services
        self._library = services.library_service
        self._token_status: SecretStatus | None = None
        # Keyring requests sent and not answered yet; what the keyring said shows once none is left.
        self._pending = 0

        self.tokenBox = QGroupBox()
        self.tokenLabel = QLabel()
        self.tokenEdit = QLineEdit()
        self.tokenEdit.setObjectName("tokenEdit")
        self.tokenEdit.setEchoMode(QLineEdit.EchoMode.Password)
        self.tokenLabel.setBuddy(self.tokenEdit)
        self.saveTokenButton = push_button("saveToken")
        self.clearTokenButton = push_button("clearToken")
        self.tokenStatus = plain_label("tokenStatus")
        token_row = QHBoxLayout()
        token_row.addWidget(self.tokenEdit, 1)
        token_row.addWidget(self.saveTokenButton)
        token_row.addWidget(self.clearTokenButton)
        token_form = QFormLayout(self.tokenBox)
        token_form.addRow(self.tokenLabel, token_row)
        token_form.addRow(self.tokenStatus)

        self.endpointBox = QGroupBox()
        self.endpointLabel = QLabel()
        self.endpointEdit = QLineEdit()
        self.endpointEdit.setObjectName("endpointEdit")
        self.endpointEdit.setText(services.settings.hf_endpoint or "")
        self.endpointLabel.setBuddy(self.endpointEdit)
        self.applyEndpointButton = push_button("applyEndpoint")
        self.endpointStatus = plain_label("endpointStatus")
        endpoint_row = QHBoxLayout()
        endpoint_row.addWidget(self.endpointEdit, 1)
        endpoint_row.addWidget(self.applyEndpointButton)
        endpoint_form = QFormLayout(self.endpointBox)
        endpoint_form.addRow(self.endpointLabel, endpoint_row)
        endpoint_form.addRow(self.endpointStatus)

        self.updatesBox = QGroupBox()
        self.checkUpdatesDaily = QCheckBox()
        self.checkUpdatesDaily.setObjectName("checkUpdatesDaily")
        self.checkUpdatesDaily.setChecked(services.settings.check_updates_daily)
        updates_layout = QVBoxLayout(self.updatesBox)
        updates_layout.addWidget(self.checkUpdatesDaily)

        layout = QVBoxLayout(self)
        layout.addWidget(self.tokenBox)
        layout.addWidget(self.endpointBox)
        layout.addWidget(self.updatesBox)
        layout.addStretch(1)

        self.saveTokenButton.clicked.connect(self.save_token)
        self.tokenEdit.returnPressed.connect(self.save_token)
        self.clearTokenButton.clicked.connect(self.clear_token)
        self.applyEndpointButton.clicked.connect(self.apply_endpoint)
        self.endpointEdit.returnPressed.connect(self.apply_endpoint)
        self.checkUpdatesDaily.toggled.connect(self._daily_check_toggled)
        self._library.tokenChanged.connect(self._on_token)
        self._library.failed.connect(self._on_failed)
        self.retranslate()
        self._asked()
        self._library.token_status()

    def retranslate(self) -> None:
        self.tokenBox.setTitle(self.tr("Hugging Face token"))
        self.tokenLabel.setText(self.tr("&Token"))
        self.tokenEdit.setPlaceholderText(self.tr("hf_… (for gated and private models)"))
        self.saveTokenButton.setText(self.tr("Save"))
        self.clearTokenButton.setText(self.tr("Remove"))
        self.endpointBox.setTitle(self.tr("Hub endpoint"))
        self.endpointLabel.setText(self.tr("&Address"))
        try:
            default = resolve_endpoint(None)
        except HearthError:
            default = ""
        self.endpointEdit.setPlaceholderText(default)
        self.endpointEdit.setToolTip(
            self.tr("A Hugging Face mirror or internal server; empty: $HF_ENDPOINT, else huggingface.co")
        )
        self.applyEndpointButton.setText(self.tr("Apply"))
        self.updatesBox.setTitle(self.tr("Model updates"))
        self.checkUpdatesDaily.setText(self.tr("Check the Hub for updates to downloaded models once a day"))
        self.checkUpdatesDaily.setToolTip(
            self.tr(
                "When the Models window opens, at most once a day; nothing is downloaded until you press "
                "Update"
            )
        )
        self._show_token()

    def save_token(self) -> None:
        text = self.tokenEdit.text()
        if not text.strip():
            return
        # The widget lets go of the token at once; only the service's worker holds it from here.
        self.tokenEdit.clear()
        self._asked()
        self._library.set_token(text)

    def clear_token(self) -> None:
        self._asked()
        self._library.clear_token()

    def apply_endpoint(self) -> None:
        text = self.endpointEdit.text().strip()
        try:
            endpoint = resolve_endpoint(text or None)
        except HearthError as exc:
            self.endpointStatus.setText(str(exc))
            return
        self._services.update_settings(hf_endpoint=text or None)
        self.endpointStatus.setText(
            self.tr("Searches and downloads use {endpoint}.").format(endpoint=endpoint)
        )

    def _daily_check_toggled(self, enabled: bool) -> None:
        self._services.update_settings(check_updates_daily=enabled)

    def _asked(self) -> None:
        # The buttons stay enabled: the keyring worker takes requests in order, and the last one wins.
        self._pending += 1
        self._show_token()

    def _on_token(self, status: SecretStatus) -> None:
        self._pending = max(0, self._pending - 1)
        self._token_status = status
        self._show_token()

    def _on_failed(self, operation: str, message: str) -> None:
        if operation == "token":
            self._pending = max(0, self._pending - 1)
            self.tokenStatus.setText(message)

    def _show_token(self) -> None:
        status = self._token_status
        if self._pending:
            self.tokenStatus.setText(self.tr("Asking the system keyring…"))
        elif status is None:
            self.tokenStatus.setText("")
        elif status.present and status.persisted:
            self.tokenStatus.setText(
                self.tr("A token is saved in the system keyring ({backend}).").format(backend=status.backend)
            )
        elif status.present:
            self.tokenStatus.setText(
                self.tr("Session only: the token is used until Hearth closes, not saved. {reason}").format(
                    reason=status.reason
                )
            )
        elif status.reason:
            self.tokenStatus.setText(
                self.tr("No token. The system keyring cannot be used: {reason}").format(reason=status.reason)
            )
        else:
            self.tokenStatus.setText(self.tr("No token set."))

    def changeEvent(self, event: QEvent) -> None:
        if event.type() == QEvent.Type.LanguageChange:
            self.retranslate()
        super().changeEvent(event)
