"""Application settings, one tab per area. Settings for one chat live in ui/settings_panel.py instead."""

from __future__ import annotations

from PySide6.QtCore import QEvent
from PySide6.QtWidgets import QDialog, QDialogButtonBox, QTabWidget, QVBoxLayout, QWidget

from app.qt.services import AppServices
from ui.library_settings import HubSettingsPage


class SettingsDialog(QDialog):
    def __init__(self, services: AppServices, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("settingsDialog")
        self.tabs = QTabWidget()
        self.hubPage = HubSettingsPage(services)
        self.tabs.addTab(self.hubPage, "")
        buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Close)
        buttons.rejected.connect(self.reject)
        close = buttons.button(QDialogButtonBox.StandardButton.Close)
        # Enter in the token field saves the token; it must not close the dialog before the answer shows.
        close.setAutoDefault(False)
        layout = QVBoxLayout(self)
        layout.addWidget(self.tabs)
        layout.addWidget(buttons)
        self.resize(560, 360)
        self.retranslate()

    def retranslate(self) -> None:
        self.setWindowTitle(self.tr("Hearth settings"))
        self.tabs.setTabText(self.tabs.indexOf(self.hubPage), self.tr("Models && Hub"))

    def changeEvent(self, event: QEvent) -> None:
        if event.type() == QEvent.Type.LanguageChange:
            self.retranslate()
        super().changeEvent(event)
