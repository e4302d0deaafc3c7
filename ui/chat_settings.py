"""The chat's settings pane: what the open chat (or the next new one) is generated with, presets, and the
defaults saved for a model."""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

from PySide6.QtCore import QObject, Signal

from app.chat.presets import Preset, delete_preset, list_presets, save_preset
from app.conversations.store import Conversation
from inference.protocol import SamplingParams
from ui.settings_panel import PresetChoice, SettingsPanel
from ui.window_context import WindowContext


class ChatSettings(QObject):
    """Fills the settings panel from the engine's layered settings and hands the user's edits to the session.

    `contextChanged` when what the next message is sent with changed, so the context meter measures again.
    """

    contextChanged = Signal()

    def __init__(self, context: WindowContext, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self._context = context
        self.panel = SettingsPanel()
        self.panel.preset_name_asker = context.dialogs.ask
        self.panel.set_thinking_display(context.services.settings.show_thinking)
        self.panel.set_pdf_pages(context.services.settings.pdf_pages_as_images)
        self.panel.hide()

        panel, session = self.panel, context.session
        panel.changed.connect(session.save_settings)
        panel.presetSaveRequested.connect(self._save_preset)
        panel.presetDeleteRequested.connect(self._delete_preset)
        panel.modelDefaultsRequested.connect(self._save_model_defaults)
        panel.resetRequested.connect(self._reset)
        panel.overflowPolicyChanged.connect(self._set_overflow_policy)
        panel.thinkingDisplayChanged.connect(self._set_thinking_display)
        panel.pdfPagesChanged.connect(self._set_pdf_pages)
        session.conversation_loaded.connect(self.load)
        session.settings_saved.connect(self._saved)
        session.settings_reset.connect(self._was_reset)

    def retranslate(self) -> None:
        self.panel.retranslate()

    def reload(self) -> None:
        self.load(self._context.session.current_conversation())

    def load(self, conversation: Conversation | None) -> None:
        model = self._context.session.model or ""
        resolved = self._context.services.chat.engine.generation_settings(conversation, model)
        values: dict[str, Any] = asdict(resolved.sampling)
        values["context_length"] = resolved.context_length
        if conversation is None:
            scope = self.tr("Settings for the next new chat with {model}.").format(model=model or "—")
        elif conversation.settings:
            scope = self.tr("This chat's own settings.")
        else:
            scope = self.tr(
                "This chat follows the defaults for {model}; a change here is saved for this chat."
            ).format(model=model or "—")
        self.panel.load(
            scope, resolved.system_prompt, values, self._context.services.settings.overflow_policy
        )

    def _saved(self, _conversation: Conversation) -> None:
        self._context.show_info(self.tr("Settings saved for this chat"))
        self.contextChanged.emit()

    def _reset(self) -> None:
        if not self._context.session.reset_settings():
            self.load(None)

    def _was_reset(self, conversation: Conversation) -> None:
        self.load(conversation)
        self.contextChanged.emit()

    def _save_model_defaults(self, system_prompt: str | None, values: dict[str, Any]) -> None:
        services, model = self._context.services, self._context.session.model
        if model is None:
            return
        defaults = dict(services.settings.model_defaults)
        defaults[model] = {**values, "system_prompt": system_prompt}
        services.update_settings(model_defaults=defaults)
        self._context.show_info(
            self.tr("New chats with {model} start from these settings").format(model=model)
        )

    def _set_thinking_display(self, display: str) -> None:
        self._context.services.update_settings(show_thinking=display)

    def _set_pdf_pages(self, enabled: bool) -> None:
        self._context.services.update_settings(pdf_pages_as_images=enabled)

    def _set_overflow_policy(self, policy: str) -> None:
        self._context.services.update_settings(overflow_policy=policy)
        self.contextChanged.emit()

    # -- presets ----------------------------------------------------------------------------------

    def refresh_presets(self) -> None:
        home = self._context.services.paths.home
        self._context.run(lambda: list_presets(home), self._show_presets)

    def _show_presets(self, presets: list[Preset]) -> None:
        self.panel.set_presets(
            [PresetChoice(p.name, p.builtin, p.system_prompt, p.settings()) for p in presets]
        )

    def _save_preset(self, name: str, system_prompt: str | None, values: dict[str, Any]) -> None:
        sampling_values = {k: v for k, v in values.items() if k != "context_length"}
        preset = Preset(
            name=name,
            system_prompt=system_prompt,
            sampling=SamplingParams(**sampling_values),
            context_length=values.get("context_length"),
        )
        home = self._context.services.paths.home

        def saved(_result: object) -> None:
            self._context.show_info(self.tr("Preset “{name}” saved").format(name=name))
            self.refresh_presets()

        self._context.run(lambda: save_preset(home, preset), saved)

    def _delete_preset(self, name: str) -> None:
        question = self.tr("Delete the preset “{name}”?").format(name=name)
        if not self._context.dialogs.confirm(
            self.panel.window(), self.tr("Delete preset"), question, self.tr("Delete")
        ):
            return
        home = self._context.services.paths.home
        self._context.run(lambda: delete_preset(home, name), lambda _r: self.refresh_presets())
