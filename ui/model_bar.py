"""The bar above the transcript: the model picker (installed models, then each server's, then Add server…
and Manage servers…) and the button that shows the chat's settings."""

from __future__ import annotations

from collections.abc import Sequence
from typing import cast

from PySide6.QtCore import Qt, Signal
from PySide6.QtGui import QStandardItemModel
from PySide6.QtWidgets import QComboBox, QHBoxLayout, QLabel, QPushButton, QWidget

from app.chat.documents import image_refusal
from app.library.installed import InstalledModel
from app.remote.registry import ServerListing
from ui.server_dialog import ServerAdded, ServerDialog
from ui.servers_panel import ModelPicker, ServersDialog, plain_tooltip, unavailable_text
from ui.window_context import WindowContext

# The picker's last entries open the Add server and Manage servers dialogs; no model name can contain a NUL.
ADD_SERVER = "\0add-server"
MANAGE_SERVERS = "\0manage-servers"


class ModelBar(QWidget):
    """Shows the session's model and tells it when the user chooses another.

    `listed(has_models)` after the picker was filled again, `prepared` after the chosen model was asked to
    load ahead of the first message, `picked` after the user chose one.
    """

    listed = Signal(bool)
    prepared = Signal()
    picked = Signal()

    def __init__(self, context: WindowContext, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self._context = context
        self.models_loaded = False
        self._local_models: list[InstalledModel] = []
        self._server_listings: list[ServerListing] = []
        self.serverDialog: ServerDialog | None = None
        self.serversDialog: ServersDialog | None = None

        self.modelPicker = ModelPicker()
        self.modelPicker.setObjectName("modelPicker")
        self.modelPicker.setSizeAdjustPolicy(QComboBox.SizeAdjustPolicy.AdjustToContents)
        self.modelLabel = QLabel()
        self.modelLabel.setBuddy(self.modelPicker)
        self.settingsButton = QPushButton()
        self.settingsButton.setObjectName("settingsButton")
        self.settingsButton.setCheckable(True)
        layout = QHBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addWidget(self.modelLabel)
        layout.addWidget(self.modelPicker)
        layout.addStretch(1)
        layout.addWidget(self.settingsButton)

        servers = context.services.servers_service
        self.modelPicker.currentIndexChanged.connect(self._on_current_changed)
        self.modelPicker.activated.connect(self._on_picked)
        # Opening the picker tries again the servers that could not be listed.
        self.modelPicker.opening.connect(servers.retry_failed)
        servers.changed.connect(self._show_server_listings)
        # Downloads, deletes and switches in the library panel: the picker follows the library.
        context.services.library_service.modelsChanged.connect(self.show_models)

    def retranslate(self) -> None:
        self.modelLabel.setText(self.tr("Model"))
        self.settingsButton.setText(self.tr("Settings"))
        self.settingsButton.setToolTip(self.tr("This chat's system prompt and sampling (Ctrl+,)"))

    def show_models(self, models: Sequence[InstalledModel]) -> None:
        self.models_loaded = True
        self._local_models = list(models)
        self._fill()
        self.prepare_selected()

    def images_refused(self) -> str | None:
        """Why the chosen model cannot be given images (an installed text-only model), or None (a vision
        model, a server's model, which may see them, or none chosen)."""
        model = self._context.session.model
        local = next((m for m in self._local_models if m.name == model), None)
        if local is None or local.vision:
            return None
        return image_refusal(local.name, [m.name for m in self._local_models if m.vision])

    def prepare_selected(self) -> None:
        """Load the chosen model ahead of the first message, unless it crashed the runner last time."""
        context = self._context
        model = context.session.model
        if model is None or not context.preload_model or context.services.chat.busy:
            return
        local = next((m for m in self._local_models if m.name == model), None)
        # A model that crashed the runner last time waits for the user to ask for it again, and says so.
        if local is not None and local.last_load_error:
            context.show_error(
                self.tr(
                    "{model} was not loaded automatically: it crashed last time ({error}). "
                    "Send a message to try it again."
                ).format(model=model, error=local.last_load_error)
            )
            return
        # For a model on a server this loads nothing; the status bar then names the server.
        context.services.chat.preload(model)
        self.prepared.emit()

    def _fill(self) -> bool:
        """Local models, then each server's, then "Add server…" and "Manage servers…". Returns whether the
        chosen model changed."""
        picker = self.modelPicker
        # Filling is not choosing: the session picks from the new list below.
        picker.blockSignals(True)
        picker.clear()
        for model in self._local_models:
            if model.projector is None:
                picker.addItem(model.name, model.name)
                continue
            picker.addItem(self.tr("{name} · vision").format(name=model.name), model.name)
            picker.setItemData(
                picker.count() - 1,
                plain_tooltip(
                    self.tr("Can see images, with the projector {file}").format(file=model.projector.filename)
                ),
                Qt.ItemDataRole.ToolTipRole,
            )
        for listing in self._server_listings:
            if listing.error is not None:
                reason = unavailable_text(listing.error_kind)
                picker.addItem(f"{listing.server.name}: {reason}", None)
                # The server's own words: shown as written, never as markup.
                picker.setItemData(
                    picker.count() - 1, plain_tooltip(listing.error), Qt.ItemDataRole.ToolTipRole
                )
                item = cast(QStandardItemModel, picker.model()).item(picker.count() - 1)
                item.setEnabled(False)
            for remote in listing.models:
                name = f"{listing.server.name}/{remote.id}"
                picker.addItem(name, name)
        picker.insertSeparator(picker.count())
        picker.addItem(self.tr("Add server…"), ADD_SERVER)
        if self._context.services.servers_service.entries():
            picker.addItem(self.tr("Manage servers…"), MANAGE_SERVERS)
        names = [
            name
            for name in (picker.itemData(i) for i in range(picker.count()))
            if name not in (None, ADD_SERVER, MANAGE_SERVERS)
        ]
        changed = self._context.session.models_listed(names)
        self._show_chosen()
        picker.blockSignals(False)
        if not names:
            picker.setPlaceholderText(self.tr("No models installed"))
        self.listed.emit(bool(names))
        return changed

    def _show_chosen(self) -> None:
        model = self._context.session.model
        self.modelPicker.setCurrentIndex(self.modelPicker.findData(model) if model else -1)

    def _show_server_listings(self) -> None:
        if self._context.is_closed():
            return
        service = self._context.services.servers_service
        listings, managed = service.listings(), bool(service.entries())
        if listings == self._server_listings and managed == (self.modelPicker.findData(MANAGE_SERVERS) >= 0):
            return  # a server is being checked: nothing the picker shows changed
        self._server_listings = listings
        if self._fill() and self.models_loaded:
            self.prepare_selected()

    def _on_current_changed(self, index: int) -> None:
        """Whatever puts another model in the picker chooses it; only the user's choice is remembered."""
        shown = self.modelPicker.itemData(index)
        if shown not in (ADD_SERVER, MANAGE_SERVERS):
            self._context.session.choose_model(shown if isinstance(shown, str) else None, remember=False)

    def _on_picked(self, index: int) -> None:
        chosen = self.modelPicker.itemData(index)
        if chosen in (ADD_SERVER, MANAGE_SERVERS):
            self._show_chosen()
            if chosen == ADD_SERVER:
                self.open_add_server()
            else:
                self.open_manage_servers()
            return
        context = self._context
        model = chosen if isinstance(chosen, str) else None
        context.session.choose_model(model)
        if model is not None and context.preload_model and not context.services.chat.busy:
            context.services.chat.preload(model)
        self.picked.emit()

    def open_add_server(self) -> ServerDialog:
        services = self._context.services
        dialog = ServerDialog(
            services.servers, services.network, self.window(), ask_open=self._context.dialogs.ask_open
        )
        dialog.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)
        dialog.added.connect(self._on_server_added)
        self.serverDialog = dialog
        dialog.open()
        return dialog

    def open_manage_servers(self) -> ServersDialog:
        if self.serversDialog is None:
            dialogs = self._context.dialogs
            self.serversDialog = ServersDialog(
                self._context.services.servers_service,
                self.window(),
                confirm=dialogs.confirm,
                ask_open=dialogs.ask_open,
            )
            self.serversDialog.addRequested.connect(self.open_add_server)
        self.serversDialog.show()
        self.serversDialog.raise_()
        self.serversDialog.activateWindow()
        return self.serversDialog

    def _on_server_added(self, added: ServerAdded) -> None:
        self._context.services.servers_service.add(added.server, added.models)
        message = self.tr("Added {server} with {count} models").format(
            server=added.server.name, count=len(added.models)
        )
        self._context.show_info(f"{message}. {added.key_note}" if added.key_note else message)
